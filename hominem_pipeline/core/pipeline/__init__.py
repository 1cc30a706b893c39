"""The pipeline's machinery: the stage table, versions and lineage, the runner, the artifact store,
MLflow tracking and registry, and the retrain decision."""
