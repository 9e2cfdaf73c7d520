/* ragged loadgen: an open-loop HTTP load generator for the serving benchmark.
 *
 * Requests arrive as a Poisson process (exponential inter-arrival times from a seeded RNG) and are
 * sent over a pool of at most --connections keep-alive connections. The latency of a request runs
 * from its SCHEDULED send time to the last byte of its response, so a request that waits for a
 * free connection (client-side queueing) is charged that wait: there is no coordinated omission
 * (Tene, "How NOT to measure latency"). Poisson arrivals and length distributions follow the serving
 * experiments of TurboTransformers (PPoPP'21 sec. 6.3: uniform 2-100 and 5-500) and TCB (ICPP'22
 * sec. 6.2.1: normal(20, 20) clipped to 3-100).
 *
 * Request bodies follow the ragged API (app/server/): for /v1/embeddings (OpenAI shape) a length
 * distribution sends one token-id array {"input": [[101, ids..., 102]]} of exactly the drawn
 * length with ids uniform in [1000, 29000); for /embed (TEI shape) it sends {"inputs": ["w w ..."]}
 * made of single-wordpiece English words so the tokenized length is the drawn length;
 * --dist file:PATH sends one line of PATH (picked at random) as text.
 *
 * --mode generate drives OpenAI's POST /v1/completions instead: "prompt" is a token-id array of
 * a drawn length (with, for --shared-prefix-frac of the requests, the run's one shared prefix of
 * --shared-prefix-len tokens in front), "max_tokens" a drawn output length, "ignore_eos": true
 * (vLLM's extension: the output has the drawn length) and, unless --no-stream, "stream": true
 * with "stream_options": {"include_usage": true}. The stream's events give TTFT (first content
 * chunk), inter-chunk gaps (ITL), TPOT = (t_last - t_first) / (completion_tokens - 1) with the
 * token count from the usage chunk, and goodput: the requests meeting both --slo-ttft-ms and
 * --slo-tpot-ms (DistServe, OSDI'24 sec. 2; vLLM benchmark_serving.py --goodput).
 */
#ifndef RG_LOADGEN_H
#define RG_LOADGEN_H

/* Entry point of `ragged loadgen`; argv[0] is "loadgen". Prints a summary table on stdout and,
 * with --json OUT, writes the same numbers as one JSON object to OUT.
 * Returns 0 when the run completed (even if the server answered errors: those are reported),
 * 2 on bad usage, 1 when the run could not be performed (unresolvable URL, unreadable file,
 * out of memory). `ragged loadgen --help` lists the options. */
int rg_loadgen_main(int argc, char **argv);

#endif
