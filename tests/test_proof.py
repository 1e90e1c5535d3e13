"""helpers.migrate.proof: a pmap step and its port run on the same per-host data and compared.

The steps are in notebooks/scripts/port_proof_examples.py (notebook 16 proves them too; real hosts import
that file by path). Emulated proofs take
well under a second each once compiled; the two real-process ones about 2 s each."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from jax import P

from helpers.migrate import proof
from helpers.migrate.proof import prove_port

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "notebooks" / "scripts"))
import port_proof_examples as ex  # noqa: E402

EXAMPLES = str(Path(ex.__file__).resolve())


def one_line(result):
    text = result.report()
    assert not result.ok and result.error and "\n" not in text and "Traceback" not in text, text
    return text


@pytest.mark.parametrize("port", [ex.port, ex.jit_port])
def test_a_right_port_passes(port):
    result = prove_port(ex.old_step, port, ex.host_inputs)
    assert result.ok and result.compared == 5 and not result.notes, result.report()
    assert result.report() == (
        "port proof, emulated in one process (2 hosts x 4 devices, 2 steps): PASS: every output of the port "
        "(5 arrays) equals the pmap step's on every host, at every step (rtol 1e-05, atol 1e-06)")
    assert result.check() is result


def test_the_gradient_trap_is_named_with_its_ratio():
    result = prove_port(ex.old_step, ex.trapped_port, ex.host_inputs)
    assert not result.ok
    assert [d.path for d in result.differences] == ["out[0]['b1']", "out[0]['b2']", "out[0]['w1']", "out[0]['w2']"]
    assert {d.cause for d in result.differences} == {"gradient trap"}
    assert all(d.ratio == pytest.approx(8, rel=1e-3) and d.step == 0 for d in result.differences)
    text = result.report()
    assert "FAIL at step 0: 4 of 5 outputs differ" in text
    assert "out[0]['w1']: its change (output - input) is 8 times the pmap step's" in text
    assert text.count("-> the gradient trap: N = 8 (the device count)") == 1  # said once for the four
    assert "take the gradient of the pmean'd loss (notebook 06, section \"The gradient trap\")" in text
    with pytest.raises(proof.ProofError, match="gradient trap"):
        result.check()


def test_p_device_rows_are_named():
    result = prove_port(ex.old_step, ex.device_rows_port, ex.host_inputs, in_specs=ex.DEVICE_SPECS)
    assert {d.cause for d in result.differences} == {"P('device') rows"} and len(result.differences) == 5
    text = result.report()
    assert "out[1]: the hosts' copies differ from each other" in text and "where the pmap step's agree" in text
    assert "-> the P('device') pitfall: each host computed it from its own rows alone" in text
    assert "P(('host', 'device'))" in text


def test_devices_that_disagree_on_a_replicated_output_are_named():
    result = prove_port(ex.old_step, ex.per_device_loss_port, ex.host_inputs)
    assert [(d.path, d.cause) for d in result.differences] == [("out[1]", "devices disagree")]
    assert "out[1]: the devices of host 0 hold different copies" in result.report()


def test_keys_every_host_draws_alike_are_named_and_the_one_host_keys_offered():
    failed = prove_port(ex.old_dropout_step, ex.fold_in_port, ex.shared_key_inputs)
    assert not failed.ok and len(failed.notes) == 1
    assert failed.notes[0].startswith("keys: the pmap step's keys args[3] are the same on every host: device d "
                                      "of every host draws with the same key")
    assert "No port that draws a key per device of every host" in failed.notes[0]
    assert "jax.random.split(key, hosts*local)[host*local:(host+1)*local]" in failed.notes[0]
    # the port that takes the script's own keys passes, with a note; with a 1-host run's keys, no note
    kept = prove_port(ex.old_dropout_step, ex.dropout_port, ex.shared_key_inputs)
    assert kept.ok and kept.notes[0].startswith("note: the pmap step's keys args[3] are the same on every host")
    fresh = prove_port(ex.old_dropout_step, ex.dropout_port, ex.one_host_key_inputs)
    assert fresh.ok and not fresh.notes, fresh.report()


def test_one_host_keys_are_the_hosts_rows_of_one_global_split():
    import jax

    key = jax.random.PRNGKey(3)
    rows = [proof.one_host_keys(key, h, 2, 4) for h in range(2)]
    np.testing.assert_array_equal(np.concatenate(rows), np.asarray(jax.random.split(key, 8)))
    np.testing.assert_array_equal(proof.one_host_keys(jax.random.key(3), 1, 2, 4), rows[1])  # typed keys too


def test_an_unstacked_argument_follows_the_pmap_steps_in_axes():
    result = prove_port(ex.old_unstacked_params_step, ex.port, ex.unstacked_inputs, old_in_axes=(None, 0, 0))
    assert result.ok, result.report()


@pytest.mark.parametrize("call, says", [
    (lambda: prove_port(ex.old_step, ex.raising_port, ex.host_inputs),
     "NOT RUN: the port raised at step 0: ValueError: the port is not written yet"),
    (lambda: prove_port(ex.old_step, ex.wrong_structure_port, ex.host_inputs),
     "NOT RUN: the port returns PyTreeDef({'params':"),
    (lambda: prove_port(ex.old_step, ex.port, lambda h, n, d: {"x": 1}),
     "NOT RUN: host_inputs(0, 2, 4) must return a tuple of the pmap step's arguments; got dict"),
    (lambda: prove_port(ex.old_step, ex.port, lambda h, n, d: ex.host_inputs(h, n, d, 0)[:2] + (np.ones(3),)),
     "NOT RUN: host_inputs(0, 2, 4): args[2] has shape (3,); the pmap step takes it stacked"),
    (lambda: prove_port(ex.old_step, ex.port, lambda h, n, d: 1 / 0),
     "NOT RUN: host_inputs(0, 2, 4) raised ZeroDivisionError: division by zero"),
    (lambda: prove_port(ex.old_step, lambda mesh: 3, ex.host_inputs),
     "NOT RUN: new_step(mesh) must return the port's step (a function); got int"),
    (lambda: prove_port("params", ex.port, ex.host_inputs), "NOT RUN: expected MODULE:NAME"),
    (lambda: prove_port(f"{EXAMPLES}:nothing", ex.port, ex.host_inputs), "port_proof_examples.py has no 'nothing'"),
    (lambda: prove_port(ex.old_step, ex.port, ex.host_inputs, in_specs=(P(), P())),
     "NOT RUN: in_specs has 2 entries and the step takes 3 arguments"),
    (lambda: prove_port(ex.old_step, ex.port, ex.host_inputs, hosts=4),
     "NOT RUN: emulating 4 hosts x 4 devices needs 16 devices and JAX has 8"),
    (lambda: prove_port(ex.old_step, ex.port, ex.host_inputs, steps=0), "NOT RUN: steps must be a whole number"),
    (lambda: prove_port(ex.old_step, lambda mesh: lambda *a: a, ex.host_inputs, real=True),
     "NOT RUN: real hosts import new_step from a file"),
])
def test_bad_input_is_one_line(call, says):
    assert says in one_line(call())


def test_functions_can_be_named_by_file():
    result = prove_port(f"{EXAMPLES}:old_step", f"{EXAMPLES}:port", f"{EXAMPLES}:host_inputs", steps=1)
    assert result.ok, result.report()


def test_the_command_line(capsys):
    with pytest.raises(SystemExit) as done:
        proof.main(["--help"])
    assert done.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "Exit status: 0 the port's outputs equal the pmap step's; 1 they differ" in help_text
    assert "2 the proof could not run" in help_text
    assert proof.main([f"{EXAMPLES}:old_step", f"{EXAMPLES}:trapped_port", f"{EXAMPLES}:host_inputs"]) == 1
    assert "-> the gradient trap" in capsys.readouterr().out
    assert proof.main([f"{EXAMPLES}:old_step", f"{EXAMPLES}:device_rows_port", f"{EXAMPLES}:host_inputs",
                       "--in-specs", f"{EXAMPLES}:DEVICE_SPECS", "--steps", "1"]) == 1
    assert "P('device') pitfall" in capsys.readouterr().out
    assert proof.main([f"{EXAMPLES}:old_step", f"{EXAMPLES}:raising_port", f"{EXAMPLES}:host_inputs"]) == 2
    assert capsys.readouterr().out.count("\n") == 1


def test_python_m_runs_it():
    examples = "notebooks/scripts/port_proof_examples.py"
    done = subprocess.run([sys.executable, "-m", "helpers.migrate.proof", f"{examples}:old_step", f"{examples}:port",
                           f"{examples}:host_inputs", "--steps", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("port proof, emulated in one process (2 hosts x 4 devices, 1 step): PASS")


@pytest.mark.multiprocess
def test_a_right_port_passes_on_real_hosts():
    result = prove_port(ex.old_step, ex.port, ex.host_inputs, real=True)
    assert result.ok and result.where == "real processes", result.report()


@pytest.mark.multiprocess
def test_p_device_rows_on_real_hosts_are_what_the_emulation_says():
    real = prove_port(ex.old_step, ex.device_rows_port, ex.host_inputs, in_specs=ex.DEVICE_SPECS, real=True)
    emulated = prove_port(ex.old_step, ex.device_rows_port, ex.host_inputs, in_specs=ex.DEVICE_SPECS)
    assert {d.cause for d in real.differences} == {"P('device') rows"}
    assert [(d.path, d.cause) for d in real.differences] == [(d.path, d.cause) for d in emulated.differences]
    assert [d.max_abs for d in real.differences] == pytest.approx([d.max_abs for d in emulated.differences], rel=1e-4)
    assert real.report().replace("real processes", "emulated in one process") == emulated.report()


def test_a_step_pmapped_by_call_with_donation_and_a_dict_batch():
    result = prove_port(ex.hf_step, ex.hf_port, ex.hf_inputs, steps=3)
    assert result.ok and result.compared == 5, result.report()
