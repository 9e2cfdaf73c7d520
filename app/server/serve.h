/* `ragged serve`: the HTTP embedding server (TEI /embed, OpenAI /v1/embeddings, /tokenize,
 * /health, /info, /metrics) over libmicrohttpd. */
#ifndef RG_SERVER_SERVE_H
#define RG_SERVER_SERVE_H

/* Entry point of the `serve` subcommand. argv[0] is "serve"; options as `ragged serve --help`
 * prints. Runs until SIGINT/SIGTERM, then stops gracefully (queued requests are answered 503,
 * everything is freed). Returns the process exit code: 0 after a clean stop, 2 for a usage error
 * (one line on stderr, followed by the usage for an unknown option), 1 when the model or the
 * listening socket cannot be set up. */
int rg_serve_main(int argc, char **argv);
#endif
