"""Process exit codes, defined once. The README's exit-code table is this module.

A leaf: imports nothing.
"""

OK = 0
REFUSED = 1       # the command ran and the answer is no: no such job, or not in a state that allows it
USAGE = 2         # bad flags, bad JSON, bad configuration, a database that cannot be used
INTERRUPTED = 130  # stopped by Ctrl-C before it finished
