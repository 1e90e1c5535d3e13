"""Pictures of where things are: meshes, shardings, a program's traffic, the hosts' timelines.

  layout     the layout model: which device holds which slice (from JAX), and its text form
  sharding   meshes and sharded arrays drawn, coloured by device, with host borders
  explorer   the sharding explorer (ipywidgets) on top of `sharding`
  traffic    a program's collectives drawn: who sends to whom, which transfers cross hosts
  timeline   the hosts' profiler traces drawn as one timeline
  described  the words each picture carries for a reader who cannot see it (its alt text)

Every picture is drawn from data JAX gave, and says in words what it shows.
"""
