"""Exercises of notebook 00: fake devices and what a host sees."""
from helpers.exercises.core import Exercise, Mistake, WrongAnswer, call_learner, describe, register

_HOST_ENV_KEYS = ("XLA_FLAGS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "JAX_COORDINATOR_ADDRESS")


def _judge_host_env(host_env) -> None:
    for host_id, num_hosts, per_host, port in [(0, 2, 4, 12355), (1, 2, 4, 12355), (2, 3, 2, 40001), (3, 4, 1, 5123)]:
        env = call_learner(host_env, host_id, num_hosts, per_host, port)
        if not isinstance(env, dict):
            raise Mistake(f"host_env should return a dict of environment variables, but returned {describe(env)}")
        missing = [k for k in _HOST_ENV_KEYS if k not in env]
        if missing:
            raise Mistake(f"the environment has no {', '.join(missing)}; a JAX process needs all of {', '.join(_HOST_ENV_KEYS)}")
        if not all(isinstance(v, str) for v in env.values()):
            raise Mistake("environment variables are strings: wrap numbers in str(...)")
        flag = env["XLA_FLAGS"]
        if f"--xla_force_host_platform_device_count={num_hosts * per_host}" in flag and num_hosts > 1:
            raise Mistake("XLA_FLAGS gives each process the total device count; it sets ONE process's "
                          "devices, so pass devices_per_host (JAX adds the hosts' devices up itself)")
        if flag.strip() != f"--xla_force_host_platform_device_count={per_host}":
            raise Mistake(f"for {per_host} devices per host, XLA_FLAGS should be "
                          f"'--xla_force_host_platform_device_count={per_host}', not {flag!r}")
        if env["JAX_NUM_PROCESSES"] != str(num_hosts):
            raise Mistake("JAX_NUM_PROCESSES is the number of processes (hosts) in the run: num_hosts")
        if env["JAX_PROCESS_ID"] != str(host_id):
            raise Mistake("JAX_PROCESS_ID must be this host's own id, counted from 0: host_id")
        if env["JAX_COORDINATOR_ADDRESS"] != f"127.0.0.1:{port}":
            raise Mistake("every host must name the same coordinator, process 0 on this machine's "
                          f"loopback address: '127.0.0.1:{{port}}', here '127.0.0.1:{port}'")


register(Exercise(
    id="00.1",
    title="the environment of one host process",
    answer_name="host_env",
    solution='''
def host_env(host_id, num_hosts, devices_per_host, port):
    """Environment variables for one host process of a run on this machine."""
    return {
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices_per_host}",
        "JAX_PLATFORMS": "cpu",
        "JAX_NUM_PROCESSES": str(num_hosts),
        "JAX_PROCESS_ID": str(host_id),
        "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
    }
''',
    judge=_judge_host_env,
    hints=(
        "Each process is started separately, so its XLA_FLAGS only describes the devices of that one process.",
        "Process ids count from 0, and every process must name the same coordinator: process 0's address.",
    ),
    wrong_answers=(
        WrongAnswer('''
def host_env(host_id, num_hosts, devices_per_host, port):
    return {"XLA_FLAGS": f"--xla_force_host_platform_device_count={num_hosts * devices_per_host}",
            "JAX_NUM_PROCESSES": str(num_hosts), "JAX_PROCESS_ID": str(host_id),
            "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}"}
''', "sets ONE process's devices"),
        WrongAnswer('''
def host_env(host_id, num_hosts, devices_per_host, port):
    return {"XLA_FLAGS": f"--xla_force_host_platform_device_count={devices_per_host}",
            "JAX_NUM_PROCESSES": str(num_hosts), "JAX_PROCESS_ID": str(host_id + 1),
            "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}"}
''', "counted from 0"),
        WrongAnswer('''
def host_env(host_id, num_hosts, devices_per_host, port):
    return {"XLA_FLAGS": f"--xla_force_host_platform_device_count={devices_per_host}",
            "JAX_NUM_PROCESSES": num_hosts, "JAX_PROCESS_ID": host_id,
            "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}"}
''', "wrap numbers in str"),
        WrongAnswer('''
def host_env(host_id, num_hosts, devices_per_host, port):
    return {"XLA_FLAGS": f"--xla_force_host_platform_device_count={devices_per_host}",
            "JAX_NUM_PROCESSES": str(num_hosts), "JAX_PROCESS_ID": str(host_id),
            "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port + host_id}"}
''', "same coordinator"),
        WrongAnswer('''
def host_env(host_id, num_hosts, devices_per_host, port):
    return {"XLA_FLAGS": f"--xla_force_host_platform_device_count={devices_per_host}"}
''', "the environment has no JAX_NUM_PROCESSES"),
    ),
))


def _judge_host_view(view) -> None:
    if not isinstance(view, tuple) or len(view) != 4 or not all(isinstance(v, int) for v in view):
        raise Mistake(f"expected a tuple of four whole numbers like (1, 2, 3, 4), got {describe(view)}")
    device_count, local_count, process_count, process_index = view
    if device_count == 4:
        raise Mistake("jax.device_count() counts the devices of ALL hosts (2 x 4), not just this host's")
    if local_count == 8:
        raise Mistake("jax.local_device_count() counts only the devices this process drives: 4")
    if process_count != 2:
        raise Mistake("jax.process_count() is the number of processes in the run: one per host, so 2")
    if process_index == 2:
        raise Mistake("process indices count from 0: the second host is process 1")
    if view != (8, 4, 2, 1):
        raise Mistake(f"not quite: {view} is not what host 1 sees; recount each of the four")


register(Exercise(
    id="00.2",
    title="what host 1 of a 2 x 4 run sees",
    answer_name="host1_view",
    solution="host1_view = (8, 4, 2, 1)  # device_count, local_device_count, process_count, process_index",
    judge=_judge_host_view,
    hints=(
        "'local' means this process's own devices; the unqualified counts cover the whole run.",
        "There are 2 processes with 4 devices each, and indices start at 0.",
    ),
    wrong_answers=(
        WrongAnswer("host1_view = (4, 4, 2, 1)", "ALL hosts"),
        WrongAnswer("host1_view = (8, 8, 2, 1)", "only the devices this process drives"),
        WrongAnswer("host1_view = (8, 4, 1, 1)", "one per host"),
        WrongAnswer("host1_view = (8, 4, 2, 2)", "count from 0"),
        WrongAnswer("host1_view = [8, 4, 2, 1]", "expected a tuple"),
    ),
))
