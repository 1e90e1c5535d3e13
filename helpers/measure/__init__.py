"""What a program costs across hosts, measured: bytes from the compiled program, time from traces.

  traffic    the bytes a compiled program's collectives send inside and across hosts (from its HLO)
  traces     the profiler traces each host wrote: events by host, step and collective
  allreduce  notebook 13's flat and hierarchical all-reduce, the programs measured
"""
