# The relay the mutated client drivers share: it starts the real driver (its command line
# is this script's arguments) and passes the driver protocol through, one line each way,
# letting a mutation answer or change a request or an answer on the way.
import json
import os
import signal
import subprocess
import sys


def relay(on_request, on_answer):
    """on_request(request) returns an answer to give without the real driver, or None;
    on_answer(request, answer) returns the answer to give."""
    real = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    for line in sys.stdin:
        request = json.loads(line)
        own = on_request(request)
        if own is not None:
            print(json.dumps(own), flush=True)
            continue
        real.stdin.write(line)
        real.stdin.flush()
        if request.get("op") == "crash":
            real.wait()
            os.kill(os.getpid(), signal.SIGKILL)
        answer = real.stdout.readline()
        if not answer:
            os.kill(os.getpid(), signal.SIGKILL)
        print(json.dumps(on_answer(request, json.loads(answer))), flush=True)
        if request.get("op") == "close":
            real.wait()
            return
