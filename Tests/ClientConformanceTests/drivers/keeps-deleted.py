# A mutated client driver: `all` keeps every record this process saved, even once it was
# deleted (here or by another device), as a client whose list never drops a deleted row.
# The harness must fail it (convergence).
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
from relay import relay

saved = {}


def on_request(request):
    if request.get("op") == "save":
        saved[(request["collection"], request["record"])] = request["data"]
    return None


def on_answer(request, answer):
    if request.get("op") == "all" and answer.get("ok"):
        shown = {record["id"] for record in answer["records"]}
        for (collection, id), data in sorted(saved.items()):
            if collection == request["collection"] and id not in shown and "pad" not in data:
                answer["records"].append({"id": id, "data": data, "version": None})
    return answer


relay(on_request, on_answer)
