#!/usr/bin/env bash
# The Python module (python/muster.py, ctypes over libmuster.so) with the system python3 against
# a real stack: submit/get/wait, the same idempotency key twice (and from 8 racing processes)
# gives one job and one id, cancel, a wait timeout, specs refused at submit or by musterd, jobs(),
# the spec builder's JSON (odd strings survive to the task), events, AUTH in the URL, unreachable
# Redis.
#
# MUSTER_LIB: the libmuster.so to load (default: the build tree's, $MUSTER_BIN/../lib);
# MUSTER_PYTHONPATH: where muster.py is (default: $MUSTER_SRC/python).  scripts/test.sh points
# both at an installed copy.
source "$(dirname "$0")/lib.sh"

py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3) || fail "no python3"
MUSTER_LIB=${MUSTER_LIB:-$(cd "$MUSTER_BIN/.." && pwd)/lib/libmuster.so.0}
[ -e "$MUSTER_LIB" ] || fail "$MUSTER_LIB not found (build the 'muster' target)"
export MUSTER_LIB PYTHONPATH=${MUSTER_PYTHONPATH:-$MUSTER_SRC/python} PYTHONDONTWRITEBYTECODE=1
# A sanitizer build of libmuster (scripts/test.sh --asan) needs its runtime loaded first; the
# interpreter's own allocations would swamp the leak report, so leaks are not checked here.
pyrun() {
    if ldd "$MUSTER_LIB" | has libasan; then
        env LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)" \
            ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" "$py" "$@"
    else
        "$py" "$@"
    fi
}
ok "python $(pyrun -c 'import sys; print(sys.version.split()[0])') with $MUSTER_LIB"

start_redis
make_config >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
start_worker n2 spot-a 8
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 2 ]'

# Everything that needs no second process, in one interpreter; each check prints "ok - ...".
pyrun - <<'PYEOF' || fail "python checks failed (see above)"
import ctypes, json, os, subprocess, sys, time
import muster

T = os.environ["T"]
url = os.environ["MUSTER_REDIS_URL"]
port = url.rsplit(":", 1)[1]

def ok(msg):
    print("ok - " + msg, flush=True)

def raises(exc_type, fn):
    """Runs fn, which must raise exc_type; returns the exception."""
    try:
        fn()
    except exc_type as e:
        return e
    raise AssertionError("no %s from %r" % (exc_type.__name__, fn))

def rcli(*args):
    return subprocess.run(["redis-cli", "-p", port, *args], check=True, capture_output=True,
                          text=True).stdout.strip()

assert muster.library_version() == "0.1.0", muster.library_version()
m = muster.connect()  # MUSTER_REDIS_URL

# submit / get / wait: a 2-task gang on both nodes.
jid = m.submit({"name": "py-gang", "tasks": 2, "gpus_per_task": 8,
                "command": ["sh", "-c", "echo $RANK"]})
job = m.wait(jid, timeout=30)
assert job["state"] == "SUCCEEDED", job
assert job["exit_code"] == 0 and job["tasks"] == 2 and job["attempt"] == 1, job
assert sorted(job["nodes"].split(",")) == ["n1", "n2"], job
assert m.get(jid)["name"] == "py-gang"
ok("submit, wait and get a 2-task gang: " + job["state"])

# Idempotency: the same key twice gives one job and the same id.
before = int(rcli("ZCARD", "muster:jobs"))
spec = {"tasks": 1, "gpus_per_task": 1, "command": ["true"]}
a, made_a = m.submit(spec, idempotency_key="py-key-1", return_created=True)
b, made_b = m.submit(spec, idempotency_key="py-key-1", return_created=True)
c = m.submit(dict(spec, idempotency_key="py-key-1"))   # the key inside the spec
assert a == b == c and made_a and not made_b, (a, b, c, made_a, made_b)
assert m.wait(a, timeout=30)["state"] == "SUCCEEDED"
assert int(rcli("ZCARD", "muster:jobs")) == before + 1
assert int(rcli("XLEN", "muster:submit")) == before + 1  # no second submission at all
assert json.loads(m.get(a)["spec"])["idempotency_key"] == "py-key-1"
ok("same idempotency key three times: one job, one id " + a)

# A key that disagrees with the spec's own is refused before anything is written.
e = raises(muster.Error,
           lambda: m.submit(dict(spec, idempotency_key="other"), idempotency_key="py-key-1"))
assert e.code_name == "MUSTER_E_SPEC", e
ok("conflicting idempotency keys: " + str(e))

# cancel a running gang.
jid = m.submit({"tasks": 2, "gpus_per_task": 8, "command": ["sleep", "300"]})
deadline = time.monotonic() + 20
while (m.get(jid) or {}).get("state") != "RUNNING":
    assert time.monotonic() < deadline, m.get(jid)
    time.sleep(0.1)
e = raises(muster.Timeout, lambda: m.wait(jid, timeout=0.5))
assert e.job["state"] == "RUNNING", e.job
ok("wait times out on a running job: " + str(e))
m.cancel(jid)
job = m.wait(jid, timeout=20)
assert job["state"] == "CANCELLED", job
m.cancel(jid)   # cancelling a finished job is not an error
ok("cancel stopped a running gang: " + job["state"])

# Specs musterd's parse refuses raise muster.Error (MUSTER_E_SPEC) at submit with musterd's own
# message, plain or idempotent, and nothing is written; the same text by XADD (bypassing the
# clients) is REJECTED by musterd with that message.
for text, want in (('{"tasks": 0, "command": ["true"]}', "tasks: expected an integer 1..4096"),
                   ("not json", "spec"),
                   ('{"array": "5-1", "command": ["true"]}',
                    "array: a range ends before it starts in '5-1'"),
                   ('{"colour": "blue", "command": ["true"]}', "spec: unknown key 'colour'"),
                   ('{"singleton": true, "command": ["true"]}', "singleton: needs a 'name'")):
    n0 = rcli("XLEN", "muster:submit")
    e = raises(muster.Error, lambda: m.submit(text))
    assert e.code_name == "MUSTER_E_SPEC" and want in str(e), (e.code_name, str(e))
    e2 = raises(muster.Error, lambda: m.submit(text, idempotency_key="bad-" + str(len(text))))
    assert e2.code_name in ("MUSTER_E_SPEC", "MUSTER_E_PARSE"), (e2.code_name, str(e2))
    assert rcli("XLEN", "muster:submit") == n0, "a refused spec was written: " + text
    jid = rcli("XADD", "muster:submit", "*", "spec", text)
    job = m.wait(jid, timeout=20)
    assert job["state"] == "REJECTED" and job["error"] == str(e), (job, str(e))
    ok("spec %r raises at submit: %s" % (text, e))

# What needs the cluster config is musterd's: such a spec gets an id and ends REJECTED.
jid = m.submit('{"queue": "no-such-queue", "command": ["true"]}')
job = m.wait(jid, timeout=20)
assert job["state"] == "REJECTED" and "no-such-queue" in job["error"], job
ok("a spec for an unknown queue: REJECTED by musterd: " + job["error"])

# Bad input: a malformed id, an unknown job, a bad key.
for call, code in ((lambda: m.get("nope"), "MUSTER_E_INVAL"),
                   (lambda: m.cancel("1-0"), "MUSTER_E_NOTFOUND"),
                   (lambda: m.wait("1-0", timeout=1), "MUSTER_E_NOTFOUND"),
                   (lambda: m.submit(spec, idempotency_key=""), "MUSTER_E_INVAL"),
                   (lambda: m.submit("[1]", idempotency_key="k"), "MUSTER_E_PARSE")):
    e = raises(muster.Error, call)
    assert e.code_name == code, (code, e.code_name, str(e))
assert m.get("1-0") is None
ok("bad ids, unknown jobs and bad keys are errors with codes")

# jobs(): listing with filters.
every = m.jobs(all=True)
assert len(every) == int(rcli("ZCARD", "muster:jobs")), len(every)
assert [j["id"] for j in every] == sorted((j["id"] for j in every),
                                          key=lambda i: tuple(map(int, i.split("-"))))
assert {j["state"] for j in m.jobs(all=True, state="REJECTED")} == {"REJECTED"}
assert len(m.jobs(all=True, limit=2)) == 2 and m.jobs() == []
ok("jobs(): %d in all, filters by state and limit" % len(every))

# The C builder and events, straight through ctypes.
lib = ctypes.CDLL(os.environ["MUSTER_LIB"])
lib.muster_spec_new.restype = ctypes.c_void_p
lib.muster_spec_json.restype = ctypes.c_void_p
lib.muster_spec_json.argtypes = [ctypes.c_void_p, ctypes.POINTER(muster._Err)]
for fn in ("muster_spec_set_name", "muster_spec_set_env", "muster_spec_set_command",
           "muster_spec_set_tasks", "muster_spec_set_gpus_per_task", "muster_spec_set_capacity",
           "muster_spec_set_checkpoint", "muster_spec_set_max_retries", "muster_spec_free",
           "muster_spec_submit", "muster_free", "muster_events_follow", "muster_events_next",
           "muster_events_free", "muster_connect", "muster_close"):
    getattr(lib, fn).argtypes = None
lib.muster_connect.restype = ctypes.c_void_p
lib.muster_events_follow.restype = ctypes.c_void_p
S = ctypes.c_void_p(lib.muster_spec_new())
weird = 'quote " backslash \\ newline \n tab \t unicode \u00e9\u6f22 brace {"x": [1]}'
out_file = os.path.join(T, "weird.out")
argv = (ctypes.c_char_p * 3)(b"sh", b"-c", ('printf %s "$WEIRD" > ' + out_file).encode())
caps = (ctypes.c_char_p * 2)(b"spot", b"on-demand")
assert lib.muster_spec_set_name(S, weird.encode()) == -1       # control characters: refused
assert lib.muster_spec_set_tasks(S, 5000) == -1                 # sticky: reported first
err = muster._Err()
assert lib.muster_spec_json(S, ctypes.byref(err)) is None
assert err.code == 12 and err.message.decode() == "name: control character 0x0a at byte %d" \
    % weird.index("\n"), err.message
lib.muster_spec_free(S)
ok("builder keeps its first error: " + err.message.decode())

# Wait, then relax: needs the required level first; then it joins the topology object.
for fn in ("muster_spec_set_topology", "muster_spec_set_topology_relax"):
    getattr(lib, fn).argtypes = None
S = ctypes.c_void_p(lib.muster_spec_new())
assert lib.muster_spec_set_topology_relax(S, 300) == -1
lib.muster_spec_free(S)
S = ctypes.c_void_p(lib.muster_spec_new())
assert lib.muster_spec_set_command(S, 3, argv) == 0
assert lib.muster_spec_set_topology(S, b"rack", None) == 0
assert lib.muster_spec_set_topology_relax(S, 0) == -1
lib.muster_spec_free(S)
S = ctypes.c_void_p(lib.muster_spec_new())
assert lib.muster_spec_set_command(S, 3, argv) == 0
assert lib.muster_spec_set_topology(S, b"rack", None) == 0
assert lib.muster_spec_set_topology_relax(S, 300) == 0
text = ctypes.c_void_p(lib.muster_spec_json(S, ctypes.byref(err)))
assert json.loads(ctypes.string_at(text).decode())["topology"] == {"required": "rack",
                                                                   "relax_after_s": 300}
lib.muster_free(text)
lib.muster_spec_free(S)
ok("builder: topology with relax_after_s, refused without a required level or out of range")

S = ctypes.c_void_p(lib.muster_spec_new())
assert lib.muster_spec_set_name(S, b"builder \xc3\xa9") == 0
assert lib.muster_spec_set_env(S, b"WEIRD", weird.encode()) == 0
assert lib.muster_spec_set_command(S, 3, argv) == 0
assert lib.muster_spec_set_tasks(S, 1) == 0
assert lib.muster_spec_set_gpus_per_task(S, 2) == 0
assert lib.muster_spec_set_capacity(S, 2, caps) == 0
assert lib.muster_spec_set_checkpoint(S, b"SIGUSR2", 30) == 0
assert lib.muster_spec_set_max_retries(S, 0) == 0
text = ctypes.c_void_p(lib.muster_spec_json(S, ctypes.byref(err)))
spec_doc = json.loads(ctypes.string_at(text).decode())
lib.muster_free(text)
assert spec_doc["env"]["WEIRD"] == weird and spec_doc["checkpoint"] == {"signal": "SIGUSR2",
                                                                         "grace_s": 30}, spec_doc
C = ctypes.c_void_p(lib.muster_connect(None, None, ctypes.byref(err)))
assert C.value, err.message
EV = ctypes.c_void_p(lib.muster_events_follow(C, None, False, ctypes.byref(err)))
assert EV.value, err.message
idbuf = ctypes.create_string_buffer(48)
created = ctypes.c_bool()
assert lib.muster_spec_submit(C, S, idbuf, ctypes.c_size_t(48), ctypes.byref(created),
                              ctypes.byref(err)) == 0, err.message
lib.muster_spec_free(S)
jid = idbuf.value.decode()
job = m.wait(jid, timeout=30)
assert job["state"] == "SUCCEEDED", job
with open(out_file, encoding="utf-8") as f:
    assert f.read() == weird
ok("builder JSON: odd strings reach the task's environment unchanged")

class Event(ctypes.Structure):
    _fields_ = [("id", ctypes.c_char * 48), ("job", ctypes.c_char * 48),
                ("state", ctypes.c_char * 32), ("reason", ctypes.c_char * 512),
                ("attempt", ctypes.c_int), ("at_ms", ctypes.c_int64)]
states = []
ev = Event()
while lib.muster_events_next(EV, 500, ctypes.byref(ev), ctypes.byref(err)) == 1:
    if ev.job.decode() == jid:
        states.append(ev.state.decode())
assert states[0] == "PENDING" and states[-1] == "SUCCEEDED", states
assert lib.muster_events_next(EV, 0, ctypes.byref(ev), ctypes.byref(err)) == 0
lib.muster_events_free(EV)
lib.muster_close(C)
ok("events followed: " + " -> ".join(states))

# Unreachable Redis.
e = raises(muster.Error, lambda: muster.connect("redis://127.0.0.1:1"))
assert e.code_name == "MUSTER_E_REDIS" and "Connection refused" in str(e), str(e)
ok("unreachable Redis: " + str(e))
m.close()
PYEOF

# 8 processes race with one key: one job, one id.
before=$(rcli ZCARD muster:jobs)
racers=()
for i in $(seq 1 8); do
    pyrun -c 'import muster; print(muster.connect().submit({"command": ["true"]}, idempotency_key="race-1"))' \
        >"$T/race.$i" &
    racers+=("$!")
done
for pid in "${racers[@]}"; do
    wait "$pid" || fail "a racing submission failed"
done
ids=$(cat "$T"/race.* | sort -u)
if [ -z "$ids" ] || [ "$(wc -l <<<"$ids")" != 1 ]; then fail "8 racing submissions gave ids: $ids"; fi
wait_for "raced job taken in" 10 job_state_is "$ids" SUCCEEDED
[ "$(rcli ZCARD muster:jobs)" = $((before + 1)) ] || fail "racing submissions made more than one job"
ok "8 racing processes, one key: one job $ids"

# Pipelines and arrays (issue #12): Client.submit(after=, array=) through musterd, and the C
# builder's muster_spec_add_after / _add_after_key / _set_singleton / _set_array.
pyrun - <<'PYEOF' || fail "pipeline checks failed"
import ctypes, json, os, muster
T = os.environ["T"]
with muster.connect() as m:
    prep = m.submit({"command": "echo prep >> %s/py-pipe" % T}, idempotency_key="py-prep")
    train = m.submit({"command": "echo train >> %s/py-pipe; exit 3" % T, "max_retries": 0},
                     after=["key=py-prep"])
    evaluate = m.submit({"command": "echo eval >> %s/py-pipe" % T}, after=[train + ":ok"])
    cleanup = m.submit({"command": ["true"]}, after=[(train, "notok")])
    job = m.wait(evaluate, timeout=60)
    assert job["state"] == "CANCELLED" and train in job["error"], job
    assert m.wait(cleanup, timeout=60)["state"] == "SUCCEEDED"
    assert open(T + "/py-pipe").read() == "prep\ntrain\n"
    print("ok - submit(after=...): key=, ID:ok and (ID, notok); step 3 CANCELLED when step 2 failed")
    arr = m.submit({"command": "touch %s/py-arr.$MUSTER_ARRAY_INDEX" % T}, array="0-3%2")
    assert m.wait(arr, timeout=60)["state"] == "SUCCEEDED"
    assert sorted(f for f in os.listdir(T) if f.startswith("py-arr.")) == \
        ["py-arr.%d" % i for i in range(4)]
    print("ok - submit(array=\"0-3%2\") ran 4 elements; wait() waited for all")

lib = ctypes.CDLL(os.environ["MUSTER_LIB"])
lib.muster_spec_new.restype = ctypes.c_void_p
lib.muster_spec_json.restype = ctypes.c_void_p
lib.muster_spec_json.argtypes = [ctypes.c_void_p, ctypes.POINTER(muster._Err)]
for fn in ("muster_spec_add_after", "muster_spec_add_after_key"):
    getattr(lib, fn).argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
lib.muster_spec_set_singleton.argtypes = [ctypes.c_void_p, ctypes.c_bool]
lib.muster_spec_set_after_or.argtypes = [ctypes.c_void_p, ctypes.c_bool]
lib.muster_spec_set_array.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
lib.muster_spec_set_shell_command.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
lib.muster_spec_free.argtypes = [ctypes.c_void_p]
lib.muster_free.argtypes = [ctypes.c_void_p]
S = lib.muster_spec_new()
assert lib.muster_spec_set_shell_command(S, b"true") == 0
assert lib.muster_spec_add_after(S, b"1732270000123-0", None) == 0
assert lib.muster_spec_add_after(S, b"1732270000123-0_7", b"any") == 0
assert lib.muster_spec_add_after_key(S, b"pipe:42", b"started") == 0
assert lib.muster_spec_set_singleton(S, True) == 0
assert lib.muster_spec_set_after_or(S, True) == 0
assert lib.muster_spec_set_array(S, b"0-99%8") == 0
err = muster._Err()
p = lib.muster_spec_json(S, ctypes.byref(err))
spec = json.loads(ctypes.string_at(p).decode())
lib.muster_free(p)
assert spec["after"] == [{"job": "1732270000123-0"}, {"job": "1732270000123-0_7", "when": "any"},
                         {"key": "pipe:42", "when": "started"}], spec
assert spec["singleton"] is True and spec["array"] == "0-99%8", spec
assert spec["after_or"] is True, spec  # Slurm's "?" (issue #43)
assert lib.muster_spec_add_after(S, b"1-0", b"sometimes") == -1
assert lib.muster_spec_json(S, ctypes.byref(err)) is None
assert b"when must be" in err.message, err.message
lib.muster_spec_free(S)
S = lib.muster_spec_new()
assert lib.muster_spec_set_array(S, b"5-1") == -1
assert lib.muster_spec_add_after(S, b"step-1", None) == -1
lib.muster_spec_free(S)
print("ok - the C builder: add_after, add_after_key, set_singleton, set_array; bad input refused")
PYEOF

# AUTH: a password, then a Redis 6 ACL user, in the URL.  (Existing connections stay logged in.)
rcli CONFIG SET requirepass s3cret >/dev/null
rcli -a s3cret --no-auth-warning ACL SETUSER alice on '>wonderland' '~*' '&*' +@all >/dev/null
pyrun - <<'PYEOF' || fail "AUTH checks failed"
import os, muster
port = os.environ["REDIS_PORT"]
for url in ("redis://:s3cret@127.0.0.1:%s" % port, "redis://alice:wonderland@127.0.0.1:%s/0" % port):
    with muster.connect(url) as m:
        m.wait(m.submit({"command": ["true"]}), timeout=20)
for url in ("redis://:wrong@127.0.0.1:%s" % port, "redis://127.0.0.1:%s" % port):
    try:
        with muster.connect(url) as m:
            m.submit({"command": ["true"]})
        raise AssertionError("no AUTH error for " + url)
    except muster.Error as e:
        assert e.code_name == "MUSTER_E_REDIS", e
        print("ok - refused: " + str(e))
print("ok - AUTH with a password and with an ACL user")
PYEOF
