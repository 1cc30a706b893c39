"""The live loop's data: the interaction log (log.py), its events (events.py) and what the service
remembers of them (ledger.py)."""
