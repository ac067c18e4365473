"""Peer: ONNX Runtime's com.microsoft::MultiHeadAttention contrib op, CPU execution provider,
fp32, intra-op threads N, in a one-node graph made with onnx.helper; and the MHA layer
(BERT-base, x [4, 512, 768]) as ONNX Runtime runs it: MatMul + Add (in_proj), Split,
MultiHeadAttention, MatMul + Add (out_proj).

    python3 bench/peers/ort_mha.py --threads 2 [--build build/release] bench/shapes/*.txt

Q, K, V go in as [B, S, H*D], i.e. BSHD, attngen's own layout; causal is the op's
"unidirectional" attribute. The shapes, the MHA layer and their FLOPs come from the build's
attngen_bench (common.describe()). Before timing, each graph is checked against a NumPy reference on a
small case of the same kind; a graph that cannot be built, cannot run, or computes something
else is reported as an error line, never timed.
"""
import common

PEER = "ort_mha"


def attention_reference(q, k, v, heads, causal):
    """q, k, v [B, S, H*D] -> [B, S, H*D], float64."""
    import numpy as np

    b, s, hidden = q.shape
    d = hidden // heads
    split = lambda x: x.reshape(b, s, heads, d).transpose(0, 2, 1, 3).astype(np.float64)
    scores = split(q) @ split(k).transpose(0, 1, 3, 2) / np.sqrt(d)
    if causal:
        scores = np.where(np.tril(np.ones((s, s), dtype=bool)), scores, -np.inf)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return (p @ split(v)).transpose(0, 2, 1, 3).reshape(b, s, hidden)


def session(graph, threads):
    import onnxruntime as ort
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8  # old enough for any recent ONNX Runtime
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def attention_session(b, s, heads, hidden, causal, threads):
    from onnx import TensorProto, helper

    io = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [b, s, hidden])
    attributes = {"num_heads": heads}
    if causal:
        attributes["unidirectional"] = 1
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["out"], domain="com.microsoft", **attributes)
    graph = helper.make_graph([node], "attention", [io("q"), io("k"), io("v")], [io("out")])
    return session(graph, threads)


def layer_session(b, s, e, heads, weights, threads):
    """nn.MultiheadAttention's forward for x [b, s, e] with a state dict's weights."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    initializers = [
        numpy_helper.from_array(np.ascontiguousarray(weights["in_proj_weight"].T), "w_in"),
        numpy_helper.from_array(weights["in_proj_bias"], "b_in"),
        numpy_helper.from_array(np.ascontiguousarray(weights["out_proj_weight"].T), "w_out"),
        numpy_helper.from_array(weights["out_proj_bias"], "b_out"),
        numpy_helper.from_array(np.array([e, e, e], dtype=np.int64), "split"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w_in"], ["qkv_mm"]),
        helper.make_node("Add", ["qkv_mm", "b_in"], ["qkv"]),
        helper.make_node("Split", ["qkv", "split"], ["q", "k", "v"], axis=2),
        helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["attn"], domain="com.microsoft", num_heads=heads),
        helper.make_node("MatMul", ["attn", "w_out"], ["out_mm"]),
        helper.make_node("Add", ["out_mm", "b_out"], ["y"]),
    ]
    io = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [b, s, e])
    graph = helper.make_graph(nodes, "mha_layer", [io("x")], [io("y")], initializers)
    return session(graph, threads)


def random(rng, *shape):
    return (rng.random(shape, dtype="float32") * 2 - 1).astype("float32")


def layer_weights(rng, e):
    return {"in_proj_weight": random(rng, 3 * e, e) / e ** 0.5, "in_proj_bias": random(rng, 3 * e),
            "out_proj_weight": random(rng, e, e) / e ** 0.5, "out_proj_bias": random(rng, e)}


def check_attention(causal, threads):
    """None if the op computes attention (with the causal mask when asked), else why not."""
    import numpy as np

    rng = np.random.default_rng(1)
    b, s, heads, d = 2, 7, 3, 8
    q, k, v = (random(rng, b, s, heads * d) for _ in range(3))
    out = attention_session(b, s, heads, heads * d, causal, threads).run(None, {"q": q, "k": k, "v": v})[0]
    error = float(np.abs(out - attention_reference(q, k, v, heads, causal)).max())
    return None if error < 1e-4 else f"MultiHeadAttention(unidirectional={int(causal)}) differs from the reference by {error:.3g}"


def check_layer(threads):
    import numpy as np

    rng = np.random.default_rng(2)
    b, s, e, heads = 2, 5, 16, 4
    w = layer_weights(rng, e)
    x = random(rng, b, s, e)
    out = layer_session(b, s, e, heads, w, threads).run(None, {"x": x})[0]
    qkv = x.astype(np.float64) @ w["in_proj_weight"].T + w["in_proj_bias"]
    attn = attention_reference(qkv[..., :e], qkv[..., e:2 * e], qkv[..., 2 * e:], heads, False)
    ref = attn @ w["out_proj_weight"].T + w["out_proj_bias"]
    error = float(np.abs(out - ref).max())
    return None if error < 1e-4 else f"MHA layer graph differs from the reference by {error:.3g}"


def main():
    args, described = common.arguments(__doc__)
    shapes, layer = described["shapes"], described["mha_layer"]
    names = [shape["name"] for shape in shapes] + [layer["name"]]
    try:
        import numpy as np
        import onnx  # noqa: F401 (graph building)
        import onnxruntime as ort
    except ImportError as e:
        for name in names:
            common.emit(PEER, name, error=f"not installed: {e}")
        return
    info = {"threads": args.threads, "version": ort.__version__}

    checks = {}
    for causal in (False, True):
        try:
            checks[causal] = check_attention(causal, args.threads)
        except Exception as e:  # the op or attribute does not exist in this ONNX Runtime
            checks[causal] = f"MultiHeadAttention(unidirectional={int(causal)}) cannot be built or run: {e}".splitlines()[0]
    rng = np.random.default_rng(0)
    for shape in shapes:
        if checks[shape["causal"]] is not None:
            common.emit(PEER, shape["name"], error=checks[shape["causal"]], **info)
            continue
        b, s, heads, hidden = shape["b"], shape["s"], shape["h"], shape["h"] * shape["d"]
        try:
            sess = attention_session(b, s, heads, hidden, shape["causal"], args.threads)
            feed = {name: random(rng, b, s, hidden) for name in ("q", "k", "v")}
            ms = common.median_ms(lambda: sess.run(None, feed), args.min_time)
        except Exception as e:
            common.emit(PEER, shape["name"], error=f"run failed: {e}".splitlines()[0], **info)
            continue
        common.emit(PEER, shape["name"], ms, shape["flops"], **info)
        del sess, feed

    try:
        problem = check_layer(args.threads)
    except Exception as e:
        problem = f"MHA layer graph cannot be built or run: {e}".splitlines()[0]
    if problem is not None:
        common.emit(PEER, layer["name"], error=problem, **info)
        return
    b, s, e = layer["b"], layer["s"], layer["e"]
    sess = layer_session(b, s, e, layer["h"], layer_weights(rng, e), args.threads)
    feed = {"x": random(rng, b, s, e)}
    ms = common.median_ms(lambda: sess.run(None, feed), args.min_time)
    common.emit(PEER, layer["name"], ms, layer["flops"], **info)


if __name__ == "__main__":
    main()
