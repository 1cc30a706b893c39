-- MLflow's database beside Dagster's (compose.yaml creates `dagster` itself).
CREATE DATABASE mlflow;
