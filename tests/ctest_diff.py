#!/usr/bin/env python3
"""ctest_diff.py - the tests two builds register, compared: names, commands and properties.

Usage: ctest --test-dir A --show-only=json-v1 > a.json; (the same for B); ctest_diff.py a.json b.json
Prints the tests only in A, only in B, and those whose command or a property differs; exit 1
where anything differs. An environment compares as the variables it sets (the last value of
each wins, as in the test's process), not as the list's order; the two trees' own paths are
cut from commands and properties, so that two checkouts of one tree compare equal."""
import json
import sys


def load(path):
    with open(path) as f:
        doc = json.load(f)
    tests = {}
    for t in doc["tests"]:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        if "ENVIRONMENT" in props:
            env = {}
            for kv in props["ENVIRONMENT"]:
                k, _, v = kv.partition("=")
                env[k] = v
            props["ENVIRONMENT"] = env
        tests[t["name"]] = {"command": t.get("command", []), "properties": props}
    return tests


def strip_roots(value, roots):
    if isinstance(value, str):
        for r, name in roots:
            value = value.replace(r, name)
        return value
    if isinstance(value, list):
        return [strip_roots(v, roots) for v in value]
    if isinstance(value, dict):
        return {k: strip_roots(v, roots) for k, v in value.items()}
    return value


def main():
    if len(sys.argv) not in (3, 5):
        sys.exit("usage: ctest_diff.py A.json B.json [A_SOURCE_ROOT B_SOURCE_ROOT]")
    a, b = load(sys.argv[1]), load(sys.argv[2])
    if len(sys.argv) == 5:
        a = strip_roots(a, [(sys.argv[3], "<src>")])
        b = strip_roots(b, [(sys.argv[4], "<src>")])
    only_a = sorted(set(a) - set(b))
    only_b = sorted(set(b) - set(a))
    differ = 0
    for name in only_a:
        print(f"only in A: {name}")
    for name in only_b:
        print(f"only in B: {name}  {' '.join(b[name]['command'])}")
    for name in sorted(set(a) & set(b)):
        ta, tb = a[name], b[name]
        if ta["command"] != tb["command"]:
            differ += 1
            print(f"{name}: command\n  A: {ta['command']}\n  B: {tb['command']}")
        for p in sorted(set(ta["properties"]) | set(tb["properties"])):
            va, vb = ta["properties"].get(p), tb["properties"].get(p)
            if va != vb:
                differ += 1
                print(f"{name}: {p}\n  A: {va}\n  B: {vb}")
    print(f"{len(a)} tests in A, {len(b)} in B: {len(only_a)} only in A, {len(only_b)} only in B, "
          f"{differ} differences in common tests")
    return 1 if only_a or only_b or differ else 0


if __name__ == "__main__":
    sys.exit(main())
