"""Names a script gives library functions at its top (`replicate = flax.jax_utils.replicate`): the rules read
their calls as the library's, and the binding line as the helper itself."""
from tests.migrate_support import rule_set

RENAMED = """\
import flax
import jax
replicate = flax.jax_utils.replicate
unreplicate = flax.jax_utils.unreplicate
p_step = jax.pmap(step, 'batch')
state = replicate(state)
state = p_step(state, batch)
params = unreplicate(state).params
"""


def test_a_library_copy_helper_bound_to_a_name_is_said_at_the_binding_and_each_call():
    found = rule_set(RENAMED)
    assert {line for line, rule in found if rule == "jax-utils-replicate"} == {3, 4, 6, 8}


def test_a_name_bound_to_something_else_is_not_the_library_helper():
    own = RENAMED.replace("flax.jax_utils.replicate", "make_copier()").replace("flax.jax_utils.unreplicate",
                                                                               "utils.first")
    assert not {line for line, rule in rule_set(own) if rule == "jax-utils-replicate"}



LOOP = """\
import flax
import jax
p_step = jax.pmap(step, 'batch')


def train(state, batches):
    pstate = flax.jax_utils.replicate(state)
    for batch in batches:
        pstate = p_step(pstate, batch)
    return flax.jax_utils.unreplicate(pstate)


state = train(state, batches)
"""


def test_a_function_that_replicates_inside_and_returns_one_copy_is_no_copy_helper():
    assert (13, "jax-utils-replicate") not in rule_set(LOOP)
    helper = LOOP.replace("    return flax.jax_utils.unreplicate(pstate)", "    return pstate")
    assert (13, "jax-utils-replicate") in rule_set(helper)  # it hands back the stack it made
