"""The attunement loop (design 003 4.1 "Attunement & Reflection System", FR5.1-5.4): the reward model's
predictions kept beside what people later chose (`predictions`), their calibration and drift over time
(`calibration`, `drift`), the pairs it orders against people clustered and named (`clusters`), and
the next question chosen by what the model does not know (`selection`)."""
