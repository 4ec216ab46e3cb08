"""Campaigns: generated workloads by the thousand, checked on Ray workers (`vtwin campaign`).

A task is a (family, seed) key (`families.py`); a worker (`worker.py`, a Ray actor) rebuilds
its workload, runs the campaign's systems on it (`task.py`) and returns a small result; the
driver (`driver.py`, Ray set up by `cluster.py`) writes each result into the campaign's SQLite
store as it arrives (`store.py`: resume, merge), has each new failure class shrunk into a
regression file (`shrink.py`) and writes the report (`report.py`).
"""
