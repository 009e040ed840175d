"""The command line: `main` (the `opgate` app, every verb's options and exit codes), and what the verbs' own typer
apps share with it: `options`, `console`, `outputs` (report paths checked before any work), `policy`
(--fail-on-skip, --require-gpu), `optional` (a missing optional dependency in one line). Empty on purpose: a
verb's app imports `opgate.cli.options` without importing `main`, which imports every verb."""
