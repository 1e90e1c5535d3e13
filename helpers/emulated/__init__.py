"""Several hosts emulated in one process: what the notebooks of Part I run before real processes.

  topology  how many hosts, and which host owns each device (`emulate_hosts`, `host_of`)
  hosts     what the hosts build from their host-local data: the global array a real
            multi-host run would build, with the checks real JAX would make, explained

`topology` imports JAX only inside its functions, so a notebook may import it before
`use_fake_devices`; `hosts` imports JAX, so it comes after.
"""
