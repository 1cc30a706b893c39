"""The attunement loop: the reward model's
predictions kept beside what people later chose (`predictions`), their calibration and drift over time
(`calibration`, `drift`), the pairs it orders against people clustered and named (`clusters`), and
the next question chosen by what the model does not know (`selection`)."""
