"""The service's routes, one router per audience: `openai` (the OpenAI-compatible API), `feedback` (the
project's own endpoints: replies, scores, feedback, the next question) and `admin` (raters, the audit log,
the live adapter). Each module's `router(kit)` builds its APIRouter on the app's `Kit`."""
