"""The engine every verb runs its checks on: the worker process (`worker`), the warm pool and task feed
(`runner`), a run's session (`session`), verify's stage plugin API (`stages`), spec loading in a pre-flight child
(`specload`), the one interrupt (`interrupts`), and the primitives every layer may use: child processes that die
with opgate (`children`), the one atomic file write (`atomic`), entry-point groups (`plugins`)."""
