"""The service people talk to: `hominem serve` (server.py) runs the app (app.py) over the engine
(engine.py: batched generation and scoring on one worker thread), writing every turn and piece of
feedback to the interaction log through the journal (journal.py: group commit). Imports core, never defs."""
