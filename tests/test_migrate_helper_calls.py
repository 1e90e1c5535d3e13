"""A short helper of the script that stacks rows or splits keys one a device is said at each of its calls
(helpers.migrate.helper_calls), not a longer function or a helper that runs its own pmap."""
from helpers.migrate import findings

_SCRIPT = """import jax


def shard(x):
    return x.reshape((jax.local_device_count(), -1) + x.shape[1:])


def device_keys(key):
    return jax.random.split(key, jax.local_device_count())


def gather(x):
    stacked = x.reshape((jax.local_device_count(), -1) + x.shape[1:])
    return jax.pmap(lambda v: jax.lax.all_gather(v, 'g'), axis_name='g')(stacked)[0]


def evaluate(params, batch):
    rows = batch.reshape((jax.local_device_count(), -1) + batch.shape[1:])
    a = 1
    b = 2
    c = 3
    d = 4
    e = 5
    f = 6
    g = 7
    return p_eval(params, rows)


p_step = jax.pmap(step, axis_name='i')
p_eval = jax.pmap(step, axis_name='i')
for batch in loader:
    keys = device_keys(key)
    state = p_step(state, shard(batch), keys)
    out = gather(state.metrics)
    score = evaluate(state.params, batch)
    stacked = jax.tree.map(shard, batch)
    summed = jax.tree.map(sum, batch)


def shard_all(tree):
    return jax.tree.map(shard, tree)


rows = shard_all(batch)
"""


def _rules_on(line: int) -> set[str]:
    return {f.rule for f in findings(_SCRIPT) if f.line == line}


def test_a_short_stacking_or_key_helper_is_said_at_each_call():
    assert "per-device-keys" in _rules_on(32)
    assert "local-batch" in _rules_on(36) and not _rules_on(37)  # a tree map of the helper calls it
    assert "local-batch" in _rules_on(41) and "local-batch" in _rules_on(44)  # a helper that calls one
    assert "local-batch" in _rules_on(33)
    said = [f.does for f in findings(_SCRIPT) if f.line == 33 and f.rule == "local-batch"]
    assert any("shard(...) (line 4)" in d for d in said)


def test_a_helper_running_its_own_pmap_or_a_long_function_is_not_said_at_its_calls():
    assert "local-batch" not in _rules_on(34)
    assert "local-batch" not in _rules_on(35)
