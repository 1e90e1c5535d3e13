"""Exercises of notebook 09: tensor parallelism inside a host, data parallelism across hosts."""
from helpers.exercises.kinds import Judged, WrongAnswer
from helpers.exercises.core import Kernel

KERNEL = Kernel(devices=8, hosts=2)  # the first cell: use_fake_devices(8), emulate_hosts(2)
from helpers.exercises.core import Mistake, call_learner, describe, register
from helpers.exercises.judges import require_spec

# ------------------------------------------------------------------ 09.1 specs for 2-D parallelism

_SHAPES = {"x": (256, 4), "w1": (4, 16), "w2": (16, 1)}


def _mesh(auto: bool = False):
    import jax
    from jax.sharding import AxisType

    types = (AxisType.Auto,) * 2 if auto else (AxisType.Explicit,) * 2
    return jax.make_mesh((2, 4), ("host", "device"), axis_types=types)


def _judge_tp_specs(answer) -> None:
    from jax.sharding import PartitionSpec as P

    from helpers.exercises.judges import same_placement

    if not isinstance(answer, dict) or set(answer) != set(_SHAPES):
        raise Mistake(f"expected a dict with the keys 'x', 'w1' and 'w2', each a PartitionSpec; "
                      f"got {describe(answer)}")
    specs = {name: require_spec(answer[name]) for name in _SHAPES}
    mesh = _mesh()

    def is_(name, spec):
        return same_placement(mesh, specs[name], spec, _SHAPES[name])

    if specs["w2"] == P(None, "device") or specs["w2"] == P(None, "host"):
        raise Mistake("w2's second axis is the single output; the axis to split is its first, "
                      "the hidden units, to match w1's columns")
    if is_("w1", P(None, "host")) or is_("w2", P("host", None)):
        raise Mistake("your model axis is 'host': the psum that adds up every layer's partial "
                      "results would cross the slow network between hosts, in every layer of "
                      "every step. Split the weights over 'device', inside a host")
    if is_("x", P(("host", "device"))) or is_("x", P("device")):
        raise Mistake("'device' already splits the hidden units; if it also split the batch, a "
                      "device would only ever see its own rows times its own columns. Split the "
                      "batch over 'host' only")
    if is_("x", P()):
        raise Mistake("with x replicated, both hosts compute the same rows: data parallelism "
                      "across hosts means splitting the batch over 'host'")
    if is_("w1", P("device")):
        raise Mistake("P('device') on w1 splits its rows, the 4 input features; tensor "
                      "parallelism here splits the 16 hidden units: w1's columns and w2's rows")
    if not is_("x", P("host")):
        raise Mistake(f"{specs['x']} is not the batch split over 'host'")
    if not is_("w1", P(None, "device")):
        raise Mistake(f"{specs['w1']} does not split w1's 16 hidden columns over 'device'")
    if is_("w2", P()):
        raise Mistake("w2 is replicated, but each device computes only 4 of the 16 hidden units; "
                      "split w2's rows over 'device' so each device holds the 4 rows that "
                      "multiply its units")
    if not is_("w2", P("device")):
        raise Mistake(f"{specs['w2']} does not split w2's 16 rows over 'device'")


register(Judged(
    id="09.1", kernel=KERNEL,
    title="batch over 'host', hidden units over 'device'",
    answer_name="tp_specs",
    solution='''tp_specs = {
    "x": P("host", None),     # data parallel across hosts
    "w1": P(None, "device"),  # each device: 4 of the 16 hidden units...
    "w2": P("device", None),  # ...and the 4 rows of w2 that multiply them
}''',
    judged_by=_judge_tp_specs,
    hints=(
        "The 16 hidden units are what gets split: they are w1's columns and w2's rows.",
        "Tensor-parallel collectives run in every layer, so their axis should stay inside a host; "
        "the other mesh axis splits the batch.",
    ),
    wrong_answers=(
        WrongAnswer('tp_specs = {"x": P("device", None), "w1": P(None, "host"), "w2": P("host", None)}',
                    "cross the slow network"),
        WrongAnswer('tp_specs = {"x": P(("host", "device")), "w1": P(None, "device"), "w2": P("device", None)}',
                    "Split the batch over 'host' only"),
        WrongAnswer('tp_specs = {"x": P("host"), "w1": P("device", None), "w2": P("device", None)}',
                    "splits its rows, the 4 input features"),
        WrongAnswer('tp_specs = {"x": P("host"), "w1": P(None, "device"), "w2": P(None, "device")}',
                    "the single output"),
        WrongAnswer('tp_specs = {"x": P("host"), "w1": P(None, "device"), "w2": P()}',
                    "w2 is replicated"),
        WrongAnswer('tp_specs = {"x": P(), "w1": P(None, "device"), "w2": P("device")}',
                    "both hosts compute the same rows"),
    ),
))

# ------------------------------------------------------------------ 09.2 the tensor-parallel forward


def _tp_case(seed: int = 9):
    import numpy as np

    rng = np.random.default_rng(seed)
    params = {"w1": rng.normal(size=(4, 16)).astype(np.float32) / 2,
              "b1": rng.normal(size=16).astype(np.float32),
              "w2": rng.normal(size=(16, 1)).astype(np.float32) / 4,
              "b2": np.array([1.5], np.float32)}
    x = rng.normal(size=(16, 4)).astype(np.float32)
    return params, x


def _forward(params, x):
    import numpy as np

    return np.tanh(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]


def _judge_tp_forward(tp_forward) -> None:
    import jax
    import numpy as np
    from jax.sharding import PartitionSpec as P

    if not callable(tp_forward):
        raise Mistake(f"expected a function tp_forward(p, x), but got {describe(tp_forward)}")
    mesh = _mesh(auto=True)
    specs = {"w1": P(None, "device"), "b1": P("device"), "w2": P("device", None), "b2": P()}
    params, x = _tp_case()
    mapped = jax.jit(jax.shard_map(tp_forward, mesh=mesh, in_specs=(specs, P("host", None)),
                                   out_specs=P("host", None)))
    try:
        out = call_learner(mapped, params, x)
    except Mistake as mistake:
        text = str(mistake)
        if "out_specs" in text or "replicat" in text or "vary" in text:
            raise Mistake("your output still differs from device to device: each device holds "
                          "only its 4 hidden units' share of the result. Add the shares with "
                          "jax.lax.psum over 'device'") from None
        raise
    out = np.asarray(out)
    want = _forward(params, x)
    if out.shape != want.shape:
        raise Mistake(f"the mapped output has shape {out.shape}, but the model gives {want.shape}: "
                      "return one prediction per row of this device's x block")
    if np.allclose(out, want, atol=1e-5):
        return
    partial = want - params["b2"]
    if np.allclose(out, partial + 4 * params["b2"], atol=1e-5):
        raise Mistake("b2 is added on every device before the psum, so it is counted 4 times; "
                      "add it once, after the psum")
    if np.allclose(out, partial / 4 + params["b2"], atol=1e-5):
        raise Mistake("pmean divides by the 4 devices; the partial results are pieces of one sum, "
                      "so add them with psum")
    rows = len(x) // 2
    swapped = np.concatenate([partial[rows:], partial[:rows]])
    if np.allclose(out, partial + swapped + params["b2"], atol=1e-5):
        raise Mistake("the sum also runs over 'host', which adds host 0's rows to host 1's; "
                      "sum over 'device' only")
    raise Mistake("the predictions differ from the model's tanh(x @ w1 + b1) @ w2 + b2")


register(Judged(
    id="09.2", kernel=KERNEL,
    title="tensor-parallel forward: partial products, psum over 'device', then b2",
    answer_name="tp_forward",
    solution='''
def tp_forward(p, x):
    """One device's part of the MLP: its 4 hidden units, then the sum over the host's devices."""
    hidden = jnp.tanh(x @ p["w1"] + p["b1"])      # f32[rows, 4]: this device's hidden units
    partial = hidden @ p["w2"]                     # f32[rows, 1]: their share of the output
    return jax.lax.psum(partial, "device") + p["b2"]
''',
    judged_by=_judge_tp_forward,
    hints=(
        "Each device computes its hidden units' contribution to the output; the output is the "
        "sum of the 4 contributions of one host's devices.",
        "Add the bias b2 once, after jax.lax.psum(..., 'device').",
    ),
    wrong_answers=(
        WrongAnswer('''
def tp_forward(p, x):
    return jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
''', "psum over 'device'"),
        WrongAnswer('''
def tp_forward(p, x):
    return jax.lax.psum(jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"], "device")
''', "counted 4 times"),
        WrongAnswer('''
def tp_forward(p, x):
    return jax.lax.pmean(jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"], "device") + p["b2"]
''', "add them with psum"),
        WrongAnswer('''
def tp_forward(p, x):
    return jax.lax.psum(jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"], ("host", "device")) + p["b2"]
''', "adds host 0's rows to host 1's"),
    ),
))

# ------------------------------------------------------------------ 09.3 jax.typeof in Explicit mode


def _judge_typeof(answer) -> None:
    if not isinstance(answer, str):
        raise Mistake(f"expected the text jax.typeof prints, as a string like 'float32[8@data,3]'; "
                      f"got {describe(answer)}")
    text = answer.replace(" ", "").replace("'", "").replace('"', "")
    if text == "float32[256@host,16@device]":
        return
    if not text.startswith("float32["):
        raise Mistake("the type starts with the dtype, float32, then the shape in brackets")
    if text in ("float32[128,4]", "float32[128,16]", "float32[128@host,16@device]",
                "float32[256@host,4@device]", "float32[128,4@device]"):
        raise Mistake("jax.typeof shows the global shape, (256, 16), not one device's block")
    if text == "float32[256,16]":
        raise Mistake("in Explicit mode the sharding is part of the type: after each dimension "
                      "typeof writes @ and the mesh axis that splits it")
    if text == "float32[256@host,16]":
        raise Mistake("h's 16 columns come from w1's columns, which are split over 'device', and "
                      "the product keeps that split")
    if text == "float32[256,16@device]":
        raise Mistake("h's rows come from x's rows, which are split over 'host'")
    if "(host,device)" in text:
        raise Mistake("x's rows are split over 'host' only; 'device' splits the columns")
    raise Mistake(f"{answer!r} is not the type of h; write float32[rows@axis,columns@axis]")


register(Judged(
    id="09.3", kernel=KERNEL,
    title="jax.typeof(h) is float32[256@host,16@device]",
    answer_name="h_type",
    solution='h_type = "float32[256@host,16@device]"  # rows from x (host), columns from w1 (device)',
    judged_by=_judge_typeof,
    hints=(
        "typeof writes the global shape and, after each dimension, @ and the mesh axis that "
        "splits it.",
        "The rows of x @ w1 are x's rows; its columns are w1's columns.",
    ),
    wrong_answers=(
        WrongAnswer('h_type = "float32[256,16]"', "part of the type"),
        WrongAnswer('h_type = "float32[256@host,16]"', "keeps that split"),
        WrongAnswer('h_type = "float32[128,4@device]"', "global shape"),
        WrongAnswer('h_type = "float32[256@(host,device),16]"', "'host' only"),
        WrongAnswer("h_type = (256, 16)", "expected the text"),
    ),
))
