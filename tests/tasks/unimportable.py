"""A module that fails to import, on purpose: a job naming a task in it must fail with this error."""

raise RuntimeError("tests.tasks.unimportable fails to import on purpose")
