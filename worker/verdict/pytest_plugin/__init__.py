"""The pytest plugin the worker loads into every pytest a gate runs, from a read-only folder.

Its one module, `reqdrive_results`, is imported by name (`-p reqdrive_results`) with this
folder on PYTHONPATH: it runs inside the gate's own interpreter, so it imports nothing but
the standard library and pytest's hooks by name."""
