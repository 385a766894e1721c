# SPDX-License-Identifier: MIT
"""muster: submit and wait for muster GPU gang jobs from Python.

A thin ctypes layer over libmuster (lib/muster.h); standard library only.  Client has
submit, get, wait, cancel and jobs.  The shared
library is found through the MUSTER_LIB environment variable (a path to libmuster.so.0), or
else ctypes.util.find_library("muster") (the system's library path).

    import muster

    with muster.connect() as m:            # MUSTER_REDIS_URL or redis://127.0.0.1:6379
        job_id = m.submit({"tasks": 2, "gpus_per_task": 8,
                           "command": ["python", "train.py"]},
                          idempotency_key="pipeline-42-step-3")
        job = m.wait(job_id, timeout=3600)  # a dict of the job's Redis fields
        print(job["state"], job.get("exit_code"))

A pipeline submits its steps at once; each waits for the one before (README "Pipelines"):

        prep = m.submit({"command": ["python", "prep.py"]})
        train = m.submit({"tasks": 4, "command": ["torchrun", "train.py"]}, after=[prep])
        m.wait(m.submit({"command": ["python", "eval.py"]}, after=[train]))
        sweep = m.submit({"command": ["python", "sweep.py"]}, array="0-99%8")

Errors raise muster.Error (with .code and .code_name); a wait that runs out of time raises
muster.Timeout (a TimeoutError) carrying the latest snapshot in .job.
"""

import ctypes
import ctypes.util
import json
import os
import time

__all__ = ["Error", "Timeout", "Client", "connect", "FINAL_STATES", "library_version"]

ID_MAX = 48  # MUSTER_ID_MAX


class _Err(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("message", ctypes.c_char * 256)]


class _Filter(ctypes.Structure):
    _fields_ = [("all", ctypes.c_bool), ("queue", ctypes.c_char_p), ("state", ctypes.c_char_p),
                ("limit", ctypes.c_size_t)]


class Error(Exception):
    """A libmuster failure: .code (enum muster_code), .code_name, and the message."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.code_name = _lib().muster_code_name(code).decode() if _LIB else str(code)


class Timeout(TimeoutError):
    """wait() ran out of time; .job is the latest snapshot (None if not yet taken in)."""

    def __init__(self, job_id, job):
        state = job["state"] if job else "queued"
        super().__init__(f"job {job_id} still {state} after the timeout")
        self.job_id = job_id
        self.job = job


_LIB = None


def _load():
    path = os.environ.get("MUSTER_LIB") or ctypes.util.find_library("muster")
    if not path:
        raise OSError("libmuster not found: set MUSTER_LIB to the path of libmuster.so.0, "
                      "or install it where the dynamic linker looks (ldconfig)")
    lib = ctypes.CDLL(path)
    P, I, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    E = ctypes.POINTER(_Err)
    B = ctypes.POINTER(ctypes.c_bool)
    sigs = {
        "muster_version": (S, []),
        "muster_code_name": (S, [I]),
        "muster_final_states": (I, [ctypes.c_char_p, ctypes.c_size_t]),
        "muster_free": (None, [P]),
        "muster_connect": (P, [S, S, E]),
        "muster_close": (None, [P]),
        "muster_submit": (I, [P, S, ctypes.c_char_p, ctypes.c_size_t, B, E]),
        "muster_submit_idempotent": (I, [P, S, S, ctypes.c_char_p, ctypes.c_size_t, B, E]),
        "muster_job_get": (I, [P, S, ctypes.POINTER(P), E]),
        "muster_job_wait": (I, [P, S, I, ctypes.POINTER(P), E]),
        "muster_job_cancel": (I, [P, S, E]),
        "muster_job_free": (None, [P]),
        "muster_job_json": (P, [P]),  # a char * we must muster_free, so not c_char_p
        "muster_jobs_list": (I, [P, ctypes.POINTER(_Filter), ctypes.POINTER(P), E]),
        "muster_job_list_count": (ctypes.c_size_t, [P]),
        "muster_job_list_at": (P, [P, ctypes.c_size_t]),
        "muster_job_list_free": (None, [P]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def _lib():
    global _LIB
    if _LIB is None:
        _LIB = _load()
    return _LIB


def _final_states():
    buf = ctypes.create_string_buffer(256)
    n = _lib().muster_final_states(buf, len(buf))
    if n < 0:
        raise Error(0, "libmuster: the final states do not fit")
    return frozenset(buf.value.decode().split())


_FINAL_STATES = None


def __getattr__(name):
    """FINAL_STATES: the final states, read from libmuster (its one list) on first use."""
    global _FINAL_STATES
    if name == "FINAL_STATES":
        if _FINAL_STATES is None:
            _FINAL_STATES = _final_states()
        return _FINAL_STATES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def library_version():
    """The loaded libmuster's version string, e.g. "0.1.0"."""
    return _lib().muster_version().decode()


def _enc(s):
    return None if s is None else s.encode()


def _job_json(lib, handle):
    """A borrowed struct muster_job * as a dict."""
    text = lib.muster_job_json(handle)
    if not text:
        raise MemoryError("libmuster: out of memory")
    try:
        return json.loads(ctypes.string_at(text).decode())
    finally:
        lib.muster_free(text)


def _job_dict(lib, handle):
    """Turns an owned struct muster_job * into a dict and frees it; None for NULL."""
    if not handle:
        return None
    try:
        return _job_json(lib, handle)
    finally:
        lib.muster_job_free(handle)


class Client:
    """One connection to muster's Redis.  Not thread-safe: use one Client per thread."""

    def __init__(self, url=None, prefix=None):
        self._lib = _lib()
        err = _Err()
        self._m = self._lib.muster_connect(_enc(url), _enc(prefix), ctypes.byref(err))
        if not self._m:
            raise Error(err.code, err.message.decode(errors="replace"))

    def close(self):
        if self._m:
            self._lib.muster_close(self._m)
            self._m = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _handle(self):
        if not self._m:
            raise Error(1, "connection is closed")
        return self._m

    @staticmethod
    def _raise(err):
        raise Error(err.code, err.message.decode(errors="replace"))

    def submit(self, spec, idempotency_key=None, return_created=False, after=None, array=None,
               singleton=None, after_or=None):
        """Submits a spec (a dict, or JSON text) and returns the job id.

        With idempotency_key (or an "idempotency_key" in the spec), submitting the same key
        again within 7 days (how long Redis keeps the key) returns the first job's id and makes
        no new job.  return_created=True returns
        (id, created) instead, created being False when the key already named a job.

        after, array and singleton set the spec keys of the same names (README "Pipelines" and
        "Job arrays"): after is a list of conditions, each a job id, "ID:when",
        "key=IDEMPOTENCY_KEY[:when]", an (id, when) pair or a spec-form dict, when being "ok"
        (the default), "notok", "any" or "started"; after_or=True makes any one of them enough
        (Slurm's "?"); array is Slurm's syntax ("0-99%8").

        A spec musterd's parser refuses (an unknown key, a wrong type, a reversed array range, a
        singleton without a name) raises Error (MUSTER_E_SPEC) with musterd's message, and
        nothing is submitted; what needs the cluster config (the queue, pools) musterd checks,
        and such a job ends REJECTED with an error.
        """
        if after is not None or array is not None or singleton is not None or after_or is not None:
            spec = json.loads(spec) if isinstance(spec, str) else dict(spec)
            if after is not None:
                spec["after"] = [_after_item(a) for a in after]
            if array is not None:
                spec["array"] = array
            if singleton is not None:
                spec["singleton"] = bool(singleton)
            if after_or is not None:
                spec["after_or"] = bool(after_or)
        text = spec if isinstance(spec, str) else json.dumps(spec)
        out = ctypes.create_string_buffer(ID_MAX)
        created = ctypes.c_bool(False)
        err = _Err()
        if idempotency_key is None:
            rc = self._lib.muster_submit(self._handle(), text.encode(), out, ID_MAX,
                                         ctypes.byref(created), ctypes.byref(err))
        else:
            rc = self._lib.muster_submit_idempotent(self._handle(), text.encode(),
                                                    idempotency_key.encode(), out, ID_MAX,
                                                    ctypes.byref(created), ctypes.byref(err))
        if rc != 0:
            self._raise(err)
        job_id = out.value.decode()
        return (job_id, created.value) if return_created else job_id

    def get(self, job_id):
        """The job as a dict of its Redis fields, or None while musterd has not taken it in."""
        handle = ctypes.c_void_p()
        err = _Err()
        if self._lib.muster_job_get(self._handle(), job_id.encode(), ctypes.byref(handle),
                                    ctypes.byref(err)) != 0:
            self._raise(err)
        return _job_dict(self._lib, handle.value)

    def wait(self, job_id, timeout=None):
        """Waits until the job is final and returns it as a dict.

        timeout: seconds (None = for ever).  Raises Timeout when the time runs out.  The wait
        runs in slices of at most 10 s so that Ctrl-C interrupts it promptly.
        """
        deadline = None
        if timeout is not None:
            deadline = time.monotonic() + timeout
        while True:
            if deadline is None:
                slice_ms = 10000
            else:
                left = deadline - time.monotonic()
                slice_ms = max(0, min(10000, int(left * 1000)))
            handle = ctypes.c_void_p()
            err = _Err()
            rc = self._lib.muster_job_wait(self._handle(), job_id.encode(), slice_ms,
                                           ctypes.byref(handle), ctypes.byref(err))
            if rc < 0:
                self._raise(err)
            job = _job_dict(self._lib, handle.value)
            if rc == 0:
                return job
            if deadline is not None and slice_ms < 10000:
                raise Timeout(job_id, job)

    def jobs(self, all=False, queue=None, state=None, limit=0):
        """Jobs as dicts, oldest first: the active ones, or every one with all=True."""
        f = _Filter(all, _enc(queue), _enc(state), limit)
        handle = ctypes.c_void_p()
        err = _Err()
        if self._lib.muster_jobs_list(self._handle(), ctypes.byref(f), ctypes.byref(handle),
                                      ctypes.byref(err)) != 0:
            self._raise(err)
        try:
            return [_job_json(self._lib, self._lib.muster_job_list_at(handle, i))
                    for i in range(self._lib.muster_job_list_count(handle))]
        finally:
            self._lib.muster_job_list_free(handle)

    def cancel(self, job_id):
        """Asks musterd to cancel the job; returns at once (wait() for CANCELLED)."""
        err = _Err()
        if self._lib.muster_job_cancel(self._handle(), job_id.encode(), ctypes.byref(err)) != 0:
            self._raise(err)


_WHENS = ("ok", "notok", "any", "started")


def _after_item(a):
    """One condition of submit(after=...) in the spec's form."""
    if isinstance(a, dict):
        return a
    if isinstance(a, (tuple, list)):
        ref, when = a
        return {"job": ref, "when": when}
    ref, when = a, None
    head, sep, tail = a.rpartition(":")
    if sep and tail in _WHENS:
        ref, when = head, tail
    item = {"key": ref[4:]} if ref.startswith("key=") else {"job": ref}
    if when:
        item["when"] = when
    return item


def connect(url=None, prefix=None):
    """A Client for url (None: MUSTER_REDIS_URL or redis://127.0.0.1:6379).

    url has the grammar of every muster program, parsed by libmuster itself (so the same URLs are
    taken and refused): "redis://[user:password@]host[:port][/db]" or, through Redis Sentinel,
    "redis+sentinel://[user:password@]host[:port][,host[:port]...]/master[/db]" (the Sentinels
    are asked for the primary at every connection).  A bad URL raises Error with its reason.
    prefix: the key prefix musterd is configured with (None: "muster:").
    """
    return Client(url, prefix)
