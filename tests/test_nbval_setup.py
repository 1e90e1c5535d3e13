"""The nbval set-up: log noise and libraries' warnings on stderr are ignored, anything else on stderr
still counts."""
import re
from pathlib import Path

import nbformat
import nbval.plugin

from conftest import _without_log_noise

SANITIZE = Path(__file__).with_name("nbval_sanitize.cfg")


def _stderr(text):
    return {"output_type": "stream", "name": "stderr", "text": text}


def test_absl_noise_alone_is_dropped():
    noise = ("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
             "I1130 05:01:02.123456   4242 coordination_service.cc:99] connected\n")
    assert _without_log_noise([_stderr(noise)]) == []


def test_a_real_message_on_stderr_is_kept_without_the_noise():
    text = "E1130 05:01:02.123456   4242 x.cc:1] gloo\nUserWarning: something real\n"
    assert _without_log_noise([_stderr(text)]) == [_stderr("UserWarning: something real\n")]


def test_stdout_and_results_are_untouched():
    outputs = [{"output_type": "stream", "name": "stdout", "text": "I1130 05:01:02.1 1 looks like a log\n"},
               {"output_type": "execute_result", "data": {"text/plain": "8"}}]
    assert _without_log_noise(outputs) == outputs


def test_a_kept_message_reaches_nbval_as_a_notebook_node():
    """nbval reads `output.output_type`: a cell whose stderr mixes noise and a real line once crashed it."""
    text = "E1130 05:01:02.123456   4242 x.cc:1] gloo\nUserWarning: something real\n"
    kept = nbval.plugin.transform_streams_for_comparison([nbformat.from_dict(_stderr(text))])
    assert kept == [{"output_type": "stream", "stderr": "UserWarning: something real\n"}]


def test_nbval_compares_through_the_filter():
    kept = nbval.plugin.transform_streams_for_comparison(
        [_stderr("I1130 05:01:02.123456   4242 a.cc:1] noise\n")])
    assert kept == []


def _sanitized(text: str) -> str:
    for regex, replace in re.findall(r"^regex: (.*)$\n^replace: (.*)$", SANITIZE.read_text(), flags=re.M):
        text = re.sub(regex, replace, text)
    return text


def test_sanitizers_hide_addresses_and_temp_paths_only():
    text = "<object at 0x7f3a2b1c4d50> wrote /tmp/tmpab12/x.py; device 0x1 stays"
    assert _sanitized(text) == "<object at 0xADDRESS> wrote TMPPATH; device 0x1 stays"


def test_a_losss_first_four_decimals_are_compared_and_no_more():
    """Two machines printed the same run's step 1 as 1.09136081 and 1.09136069."""
    assert _sanitized("step 1 loss 1.09136081") == _sanitized("step 1 loss 1.09136069")
    assert _sanitized("eval mse 0.58113414 over") == _sanitized("eval mse 0.58113408 over")
    assert _sanitized("loss 0.605429") == _sanitized("loss 0.605431")  # 6 printed decimals, 2 apart
    assert _sanitized("step 1 loss 1.09136081") != _sanitized("step 1 loss 1.09146081")
    assert _sanitized("loss 0.5 at lr 0.00123456") == "loss 0.5 at lr 0.00123456"


def test_a_librarys_warning_is_dropped_and_nothing_else():
    text = ("/x/site-packages/jax/_src/compiler.py:782: UserWarning: Error reading persistent compilation cache "
            "entry for 'jit_f': EOFError: \n  warnings.warn(\n"
            "/x/site-packages/orbax/checkpoint/h.py:1027: UserWarning: Sharding info not provided\n  warnings.warn(\n"
            "<cell>:3: UserWarning: the notebook's own\n  warnings.warn('the notebook's own')\n")
    assert _without_log_noise([_stderr(text)]) == [
        _stderr("<cell>:3: UserWarning: the notebook's own\n  warnings.warn('the notebook's own')\n")]


def test_a_coroutine_a_library_never_awaited_is_dropped_with_its_hint():
    """Python warns when the garbage collector frees it, from whatever line then runs (a cell's too)."""
    text = ("/tmp/ipykernel_7/1234.py:5: RuntimeWarning: coroutine 'Saver._write' was never awaited\n"
            "  print(f'restored')\n"
            "RuntimeWarning: Enable tracemalloc to get the object allocation traceback\n"
            "/x/site-packages/orbax/a.py:9: RuntimeWarning: coroutine 'b' was never awaited\n"
            "RuntimeWarning: Enable tracemalloc to get the object allocation traceback\n"
            "ValueError: the notebook's own\n")
    assert _without_log_noise([_stderr(text)]) == [_stderr("ValueError: the notebook's own\n")]
    hint_alone = _stderr("RuntimeWarning: Enable tracemalloc to get the object allocation traceback\n")
    assert _without_log_noise([hint_alone]) == []
