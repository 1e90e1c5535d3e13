"""Helpers for the jax-multihost-course notebooks.

Importing this package does not import JAX, so `helpers.devices.use_fake_devices`
can still configure fake CPU devices before JAX starts.
"""
