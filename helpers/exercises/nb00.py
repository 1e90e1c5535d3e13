"""Exercises of notebook 00: fake devices and what a host sees."""
import os
import re

from helpers.exercises.kinds import Judged, WrongAnswer
from helpers.exercises.core import Mistake, call_learner, describe, register

_RUN_KEYS = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")
_FLAG = "--xla_force_host_platform_device_count"


def _flag_counts(flags: str) -> list[str]:
    """The values given to the device-count flag inside an XLA_FLAGS string."""
    return re.findall(rf"{_FLAG}=(\S*)", flags)


def _judge_device_settings(env: dict, num_hosts: int, per_host: int) -> None:
    total = num_hosts * per_host
    counts = _flag_counts(env.get("XLA_FLAGS", ""))
    cpu = env.get("JAX_NUM_CPU_DEVICES")
    if cpu is None and not counts:
        raise Mistake("the environment does not give the process its devices: set JAX_NUM_CPU_DEVICES "
                      f"(or XLA_FLAGS='{_FLAG}=N') to this host's device count")
    if cpu is not None and cpu != str(per_host):
        inherited = "PATH" in env and cpu == os.environ.get("JAX_NUM_CPU_DEVICES")
        if inherited:
            raise Mistake(f"your environment carries JAX_NUM_CPU_DEVICES={cpu!r}, inherited from this "
                          "notebook's os.environ (use_fake_devices set it for the notebook's own "
                          "devices). It wins over XLA_FLAGS, so each process would get "
                          f"{cpu} devices: set it to devices_per_host ({per_host} here), or remove it")
        if cpu == str(total) and num_hosts > 1:
            raise Mistake("JAX_NUM_CPU_DEVICES gives each process the total device count; it sets ONE "
                          "process's devices, so pass devices_per_host (JAX adds the hosts' devices up itself)")
        raise Mistake(f"for {per_host} devices per host, JAX_NUM_CPU_DEVICES should be {str(per_host)!r}, "
                      f"not {cpu!r}")
    for count in counts:
        if count == str(per_host):
            continue
        if cpu is not None:
            raise Mistake(f"XLA_FLAGS asks for {count} devices and JAX_NUM_CPU_DEVICES for {cpu}: "
                          "JAX_NUM_CPU_DEVICES would win, but two settings that disagree are a trap "
                          "for whoever reads them; make both devices_per_host, or set only one")
        if count == str(total) and num_hosts > 1:
            raise Mistake("XLA_FLAGS gives each process the total device count; it sets ONE process's "
                          "devices, so pass devices_per_host (JAX adds the hosts' devices up itself)")
        raise Mistake(f"for {per_host} devices per host, XLA_FLAGS should hold "
                      f"'{_FLAG}={per_host}', not {env['XLA_FLAGS']!r}")


def _judge_host_env(host_env) -> None:
    for host_id, num_hosts, per_host, port in [(0, 2, 4, 12355), (1, 2, 4, 12355), (2, 3, 2, 40001), (3, 4, 1, 5123)]:
        env = call_learner(host_env, host_id, num_hosts, per_host, port)
        if not isinstance(env, dict):
            raise Mistake(f"host_env should return a dict of environment variables, but returned {describe(env)}")
        missing = [k for k in _RUN_KEYS if k not in env]
        if missing:
            raise Mistake(f"the environment has no {', '.join(missing)}; a host process of this course "
                          f"needs all of {', '.join(_RUN_KEYS)}")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise Mistake("environment variables are strings: wrap numbers in str(...)")
        _judge_device_settings(env, num_hosts, per_host)
        if env["JAX_NUM_PROCESSES"] != str(num_hosts):
            raise Mistake("JAX_NUM_PROCESSES is the number of processes (hosts) in the run: num_hosts")
        if env["JAX_PROCESS_ID"] != str(host_id):
            raise Mistake("JAX_PROCESS_ID must be this host's own id, counted from 0: host_id")
        if env["JAX_COORDINATOR_ADDRESS"] != f"127.0.0.1:{port}":
            raise Mistake("every host must name the same coordinator, process 0 on this machine's "
                          f"loopback address: '127.0.0.1:{{port}}', here '127.0.0.1:{port}'")


register(Judged(
    id="00.1",
    title="the environment of one host process",
    answer_name="host_env",
    solution='''
def host_env(host_id, num_hosts, devices_per_host, port):
    """Environment variables for one host process of a run on this machine."""
    return {
        "JAX_NUM_CPU_DEVICES": str(devices_per_host),  # this process's devices (jax 0.10.2)
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices_per_host}",  # the same, older
        "JAX_PLATFORMS": "cpu",
        "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",  # jax.distributed.initialize reads this
        "JAX_NUM_PROCESSES": str(num_hosts),  # helpers.launch.initialize passes these two on
        "JAX_PROCESS_ID": str(host_id),
    }
''',
    judged_by=_judge_host_env,
    hints=(
        "Each process is started separately, so its JAX_NUM_CPU_DEVICES (or XLA_FLAGS) only describes "
        "the devices of that one process.",
        "Process ids count from 0, and every process must name the same coordinator: process 0's address.",
        "If you start from dict(os.environ), you also copy this notebook's JAX_NUM_CPU_DEVICES: overwrite it.",
    ),
    wrong_answers=(
        WrongAnswer('''
def host_env(host_id, num_hosts, devices_per_host, port):
    return {"XLA_FLAGS": f"--xla_force_host_platform_device_count={num_hosts * devices_per_host}",
            "JAX_NUM_PROCESSES": str(num_hosts), "JAX_PROCESS_ID": str(host_id),
            "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}"}
''', "XLA_FLAGS gives each process the total device count"),
        WrongAnswer('''
def host_env(host_id, num_hosts, devices_per_host, port):
    return {"JAX_NUM_CPU_DEVICES": str(num_hosts * devices_per_host),
            "JAX_NUM_PROCESSES": str(num_hosts), "JAX_PROCESS_ID": str(host_id),
            "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}"}
''', "JAX_NUM_CPU_DEVICES gives each process the total device count"),
        WrongAnswer('''
import os
def host_env(host_id, num_hosts, devices_per_host, port):
    env = dict(os.environ)  # this notebook's variables: JAX_NUM_CPU_DEVICES="8" among them
    env.update({"XLA_FLAGS": f"--xla_force_host_platform_device_count={devices_per_host}",
                "JAX_NUM_PROCESSES": str(num_hosts), "JAX_PROCESS_ID": str(host_id),
                "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}"})
    return env
''', "inherited from this notebook's os.environ"),
        WrongAnswer('''
def host_env(host_id, num_hosts, devices_per_host, port):
    return {"JAX_NUM_CPU_DEVICES": str(devices_per_host),
            "XLA_FLAGS": f"--xla_force_host_platform_device_count={num_hosts * devices_per_host}",
            "JAX_NUM_PROCESSES": str(num_hosts), "JAX_PROCESS_ID": str(host_id),
            "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}"}
''', "two settings that disagree"),
        WrongAnswer('''
def host_env(host_id, num_hosts, devices_per_host, port):
    return {"JAX_NUM_PROCESSES": str(num_hosts), "JAX_PROCESS_ID": str(host_id),
            "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}"}
''', "does not give the process its devices"),
        WrongAnswer('''
def host_env(host_id, num_hosts, devices_per_host, port):
    return {"XLA_FLAGS": f"--xla_force_host_platform_device_count={devices_per_host}",
            "JAX_NUM_PROCESSES": str(num_hosts), "JAX_PROCESS_ID": str(host_id + 1),
            "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}"}
''', "counted from 0"),
        WrongAnswer('''
def host_env(host_id, num_hosts, devices_per_host, port):
    return {"JAX_NUM_CPU_DEVICES": devices_per_host,
            "JAX_NUM_PROCESSES": num_hosts, "JAX_PROCESS_ID": host_id,
            "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}"}
''', "wrap numbers in str"),
        WrongAnswer('''
def host_env(host_id, num_hosts, devices_per_host, port):
    return {"JAX_NUM_CPU_DEVICES": str(devices_per_host),
            "JAX_NUM_PROCESSES": str(num_hosts), "JAX_PROCESS_ID": str(host_id),
            "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port + host_id}"}
''', "same coordinator"),
        WrongAnswer('''
def host_env(host_id, num_hosts, devices_per_host, port):
    return {"XLA_FLAGS": f"--xla_force_host_platform_device_count={devices_per_host}"}
''', "the environment has no JAX_COORDINATOR_ADDRESS"),
    ),
))


# 4 hosts x 2 devices, the last host: the notebook's real run is 2 x 4, so it shows the
# pattern without giving this answer away.
_ANSWER = (8, 2, 4, 3)


def _judge_host_view(view) -> None:
    if not isinstance(view, tuple) or len(view) != 4 or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in view):
        raise Mistake(f"expected a tuple of four whole numbers like (1, 2, 3, 4), got {describe(view)}")
    if view == _ANSWER:
        return
    device_count, local_count, process_count, process_index = view
    if view == (8, 4, 2, 1):
        raise Mistake("that is what host 1 of the 2 x 4 run sees; this run has 4 hosts of 2 devices each")
    if device_count == 2:
        raise Mistake("jax.device_count() counts the devices of ALL hosts (4 x 2), not just this host's")
    if local_count == 8:
        raise Mistake("jax.local_device_count() counts only the devices this process drives: 2")
    if process_count != 4:
        raise Mistake("jax.process_count() is the number of processes in the run: one per host, so 4")
    if process_index == 4:
        raise Mistake("process indices count from 0: the last of 4 hosts is process 3")
    if process_index == 0:
        raise Mistake("0 is the first host's index; the last of 4 hosts is process 3")
    raise Mistake(f"not quite: {view} is not what the last host sees; recount each of the four")


register(Judged(
    id="00.2",
    title="what the last host of a 4 x 2 run sees",
    answer_name="last_host_view",
    solution="last_host_view = (8, 2, 4, 3)  # device_count, local_device_count, process_count, process_index",
    judged_by=_judge_host_view,
    hints=(
        "'local' means this process's own devices; the unqualified counts cover the whole run.",
        "There are 4 processes with 2 devices each, and indices start at 0.",
    ),
    wrong_answers=(
        WrongAnswer("last_host_view = (2, 2, 4, 3)", "ALL hosts"),
        WrongAnswer("last_host_view = (8, 8, 4, 3)", "only the devices this process drives"),
        WrongAnswer("last_host_view = (8, 2, 1, 3)", "one per host"),
        WrongAnswer("last_host_view = (8, 2, 4, 4)", "count from 0"),
        WrongAnswer("last_host_view = (8, 2, 4, 0)", "0 is the first host's index"),
        WrongAnswer("last_host_view = (8, 4, 2, 1)", "host 1 of the 2 x 4 run"),
        WrongAnswer("last_host_view = [8, 2, 4, 3]", "expected a tuple"),
    ),
))
