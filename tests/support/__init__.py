"""The suite's one set of helpers: broker parametrisation, the PostgreSQL test server,
waiting on conditions, running the CLI, job specs and real worker processes.

Import from the module that holds a helper (``from support.waiting import wait_for``);
``tests/README.md`` says which fixture to use for what.
"""
