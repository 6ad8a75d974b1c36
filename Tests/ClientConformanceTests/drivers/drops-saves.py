# A mutated client driver: every third save is answered ok and never reaches the store,
# as a client that drops an edit silently. The harness must fail it (local-edit).
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
from relay import relay

saves = 0


def on_request(request):
    global saves
    if request.get("op") == "save":
        saves += 1
        if saves % 3 == 0:
            return {"id": request["id"], "ok": True, "version": None}
    return None


relay(on_request, lambda request, answer: answer)
