"""`make bench`: the course measured on this machine (see run.py)."""
