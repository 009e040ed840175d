"""opgate across a fleet: the single-host verbs on every node through Ray, fleet-relative baselines,
a Prometheus exporter (`opgate serve`), and the Kubernetes / Slurm glue. Ray and prometheus-client are
the optional `fleet` extra and are imported lazily."""
