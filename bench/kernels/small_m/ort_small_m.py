"""ORT MLAS at the shapes of dnnl_small_m.c: a one-node-pair ONNX graph MatMul(X, W const) + Add(B),
one intra-op thread, ORT_ENABLE_ALL; median of repetitions for 0.4 s after 3 warm-ups, per M in
{30, 64, 130}. Prints time and GFLOP/s per (M, K, N). Run by run_xeon.sh."""
import sys, time, statistics, numpy as np, onnx, onnxruntime as ort
from onnx import helper, TensorProto, numpy_helper
shapes=[(384,1152),(384,384),(384,1536),(1536,384),(768,2304),(768,768),(768,3072),(3072,768)]
so=ort.SessionOptions(); so.intra_op_num_threads=1; so.inter_op_num_threads=1
so.graph_optimization_level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL
for K,N in shapes:
    W=numpy_helper.from_array((np.random.rand(K,N).astype(np.float32)-0.5)*0.1,"W")
    B=numpy_helper.from_array(np.random.rand(N).astype(np.float32),"B")
    X=helper.make_tensor_value_info("X",TensorProto.FLOAT,["M",K]); Y=helper.make_tensor_value_info("Y",TensorProto.FLOAT,["M",N])
    g=helper.make_graph([helper.make_node("MatMul",["X","W"],["T"]),helper.make_node("Add",["T","B"],["Y"])],"g",[X],[Y],[W,B])
    m=helper.make_model(g,opset_imports=[helper.make_opsetid("",17)]); m.ir_version=8
    s=ort.InferenceSession(m.SerializeToString(),so,providers=["CPUExecutionProvider"])
    for M in (30,64,130):
        x=np.random.rand(M,K).astype(np.float32)
        for _ in range(3): s.run(None,{"X":x})
        ts=[]; end=time.perf_counter()+0.4
        while len(ts)<5 or time.perf_counter()<end:
            t0=time.perf_counter(); s.run(None,{"X":x}); ts.append(time.perf_counter()-t0)
        t=statistics.median(ts); print(f"ort {M:4d} x {K:4d} x {N:4d}  {t*1e6:8.1f} us  {2*M*K*N/t*1e-9:6.1f} GFLOP/s", flush=True)
