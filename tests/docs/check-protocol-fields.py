#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""check-protocol-fields.py PROTO_FIELDS README: protocol/README.md against the field tables of
protocol/codec_fields.c (printed by the test tool tests/tools/proto_fields.c; issue #41: the code
said "the README reads straight off proto_msg_fields[]" and nothing checked it).  Fails when a
table of the README names a key the code lacks or lacks one it has, or differs in which message
types carry a key, whether it is always written (bold), its msgpack type, its integer range or
its string cap."""
import re
import subprocess
import sys

tool, readme = sys.argv[1], sys.argv[2]
fields = {"msg": {}, "ref": {}, "gpu": {}}
for line in subprocess.run([tool], check=True, capture_output=True, text=True).stdout.splitlines():
    table, key, kind, rng, types, always = line.split("\t")
    fields[table][key] = dict(kind=kind, range=rng, types=set() if types == "ALL" else set(types.split(",")),
                              all=types == "ALL", always=always == "yes")
text = open(readme, encoding="utf-8").read()
problems = []


def table_after(marker):
    """The rows (lists of cells) of the first markdown table after the line that starts with marker."""
    at = text.find("\n" + marker)
    if at < 0:
        problems.append(f"no '{marker}' in {readme}")
        return []
    rows = []
    for line in text[at + 1:].splitlines()[1:]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            break
    return rows[2:]  # past the header and the |---| line


def keys_in(cell):
    """The `key`s of a cell, its parenthesised notes left out; and those in bold."""
    while True:
        stripped = re.sub(r"\([^()]*\)", "", cell)
        if stripped == cell:
            break
        cell = stripped
    return set(re.findall(r"`([a-z_0-9]+)`", cell)), set(re.findall(r"\*\*`([a-z_0-9]+)`\*\*", cell))


def same(what, readme_keys, code_keys):
    for k in sorted(readme_keys - code_keys):
        problems.append(f"{what}: README names '{k}', which the code's table lacks")
    for k in sorted(code_keys - readme_keys):
        problems.append(f"{what}: README lacks '{k}'")


def check_cell(what, key, f, type_cell, range_cell):
    """msgpack type (first word of type_cell), and the integer range or string cap."""
    words = type_cell.split()
    if f["kind"] != "other" and (not words or words[0] != f["kind"]):
        problems.append(f"{what}: '{key}' is {f['kind']} in the code, '{type_cell}' in README")
    if f["kind"] == "int" and not range_cell.startswith(f["range"]):
        problems.append(f"{what}: '{key}' ranges {f['range']} in the code, README says '{range_cell}'")
    if f["kind"] == "str" and f"≤ {f['range']}" not in type_cell + " " + range_cell:
        problems.append(f"{what}: '{key}' holds at most {f['range']} bytes in the code, README says "
                        f"'{type_cell}', '{range_cell}'")


msg = fields["msg"]
header = {k for k, f in msg.items() if f["all"]}

# ### Header: the keys every type carries.
rows = table_after("### Header")
same("Header", {keys_in(r[0])[0].pop() for r in rows if keys_in(r[0])[0]}, header)
for r in rows:
    for k in keys_in(r[0])[0] & header:
        check_cell("Header", k, msg[k], r[1], r[1])

# ### Types and their keys: per type, the keys it carries, the always-written ones in bold.
rows = table_after("### Types and their keys")
types_seen = set()
for r in rows:
    t = r[0].strip("`")
    types_seen.add(t)
    listed, bold = keys_in(r[2])
    want = {k for k, f in msg.items() if t in f["types"]}
    same(f"Types and their keys, {t}", listed, want)
    for k in sorted(want & listed):
        if msg[k]["always"] != (k in bold):
            problems.append(f"Types and their keys, {t}: '{k}' is {'' if msg[k]['always'] else 'not '}"
                            "always written in the code; README's bold says otherwise")
same("Types and their keys (types)", types_seen, set().union(*(f["types"] for f in msg.values())) | {"DRAIN"})

# ### Keys: every key but the header's (which it may repeat), several to a row at times.
rows = table_after("### Keys")
listed = set()
for r in rows:
    ks = keys_in(r[0])[0]
    listed |= ks
    for k in ks & set(msg):
        check_cell("Keys", k, msg[k], r[1], r[2])
same("Keys", listed - header, set(msg) - header)

# The task-ref map and the gpu map: keys, types, ranges; "written" says when not always.
for marker, table in (("**task-ref map**", "ref"), ("**gpu map**", "gpu")):
    rows = table_after(marker)
    code = fields[table]
    listed = set()
    for r in rows:
        ks = keys_in(r[0])[0]
        listed |= ks
        for k in ks & set(code):
            check_cell(marker, k, code[k], r[1], r[2])
            if table == "ref" and (r[3] == "always") != code[k]["always"]:
                problems.append(f"{marker}: '{k}' written '{r[3]}' in README, always={code[k]['always']} in the code")
            if table == "gpu" and ("written" in r[2]) == code[k]["always"]:
                problems.append(f"{marker}: '{k}' is {'' if code[k]['always'] else 'not '}always written in "
                                "the code; README's range column says otherwise")
    same(marker, listed, set(code))

for p in problems:
    print("FAIL: " + p)
if not problems:
    print(f"ok: {readme} agrees with the field tables ({sum(len(t) for t in fields.values())} keys)")
sys.exit(1 if problems else 0)
