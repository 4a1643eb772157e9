"""The chaos storm behind ``python make.py chaos``: crash-safety a user can prove on their own disk.

``cli`` runs a storm against the built ``dist/rowfleet.pyz``; ``storm`` owns the fleet's
processes and the harm done to them; ``check`` is the pure judge of what is left
(tested by planting faults); ``database`` and ``postgres`` read the evidence past rowfleet;
``chaos_tasks`` and ``seed`` run inside the archive's processes. Stdlib only; nothing
here imports rowfleet except the two files the archive runs.
"""
