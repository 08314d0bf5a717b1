"""The loop from the workers back to the engine, as pure rules (no I/O, no clock, no kopf).

- :mod:`.reports`: what a worker may send (the progress report) and its validation;
- :mod:`.steps`: the observed step time (median over a window), progress figures and the ETA;
- :mod:`.drift`: observed against predicted, and stragglers in the gang;
- :mod:`.calibration`: per machine type and workload kind corrections from finished jobs;
- :mod:`.start_time`: when a waiting job is expected to start.

The kopf shell (controllers/progress_server.py, controllers/progress_loop.py) feeds them.
"""
