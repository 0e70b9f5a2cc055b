"""serve/cluster/signing.py makes the value core/session_ids.forwarded makes and gives the answer its
forwarded_check gives, over a table of requests, keys, principals, views, nonces and tampered values."""

from __future__ import annotations

import itertools

import pytest

from mcpgate.core import session_ids
from mcpgate.serve.cluster.signing import CheckedBody, Signer, body_digest

pytestmark = pytest.mark.fast

KEYS = [b"k", b"bench-cluster-secret-0123456789abcdef", b"x" * 64, b"y" * 65, b"z" * 200, bytes(range(40))]
REQUESTS = [
    ("POST", "/mcp", "", "i1.abc.def", b'{"jsonrpc":"2.0","id":1,"method":"ping"}'),
    ("GET", "/servers/a b/mcp", "session_id=x&y=%22", "", b""),
    ("DELETE", "/mcp", "", 'i\u00e9."quoted"\\', b"\x00\xff" * 50),
    ("POST", "/servers/\u2603/messages", "a=\u2603", "s", b"x" * 70000),
]
PRINCIPALS = ["static", "user@example.com", "", "\u00e9t\u00e9 \u2603", 'a"b\\c']
VIEWS = ["", "3~ab", "0~" + "f" * 62]
NONCES = ["ch~7", "A" * 22, "a-b_c~0", "x" * 64]
NOW = 1_700_000_000.7


def cases() -> itertools.product[tuple[bytes, tuple[str, str, str, str, bytes], str, str, str]]:
    return itertools.product(KEYS, REQUESTS, PRINCIPALS, VIEWS, NONCES)


def test_the_value_is_session_ids_value() -> None:
    for key, (method, path, query, session, body), principal, view, nonce in cases():
        request = session_ids.ForwardedRequest(method, path, query, session, body)
        expected = session_ids.forwarded(principal, "i2", NOW, request, key, view, nonce)
        made = Signer(key).value(principal, "i2", NOW, (method, path, query, session), body_digest(body), view, nonce)
        assert made == expected


def test_a_signer_made_once_signs_every_request_as_session_ids_does() -> None:
    signers = {key: Signer(key) for key in KEYS}  # its remembered parts shared across the table
    for key, (method, path, query, session, body), principal, view, nonce in cases():
        request = session_ids.ForwardedRequest(method, path, query, session, body)
        made = signers[key].value(principal, "i9", NOW, (method, path, query, session), body_digest(body), view, nonce)
        assert made == session_ids.forwarded(principal, "i9", NOW, request, key, view, nonce)


def tampered(value: str) -> list[str]:
    """The value with each of its parts changed, dropped or doubled, and some malformed ones."""
    parts = value.split(".")
    out = []
    for index in range(len(parts)):
        changed = list(parts)
        changed[index] = changed[index] + "A"
        out.append(".".join(changed))
        out.append(".".join(parts[:index] + parts[index + 1 :]))
    out += [value + ".x", "", ".....", "a.b.c.d.e.f", value.replace(parts[2], str(int(NOW) + 7))]
    out += [value.replace(parts[2], "1" * 13), value.replace(parts[2], "-1"), value.replace(parts[1], "i 2")]
    out += [value.replace(parts[3], "n" * 65), value.replace(parts[3], ""), value.replace(parts[4], "a.b")]
    return out


def test_the_check_answers_as_session_ids_check() -> None:
    few = itertools.product(KEYS[1::2], REQUESTS, PRINCIPALS[::2], VIEWS, NONCES[::3])
    for key, (method, path, query, session, body), principal, view, nonce in few:
        signer = Signer(key)
        request = session_ids.ForwardedRequest(method, path, query, session, body)
        value = session_ids.forwarded(principal, "i2", NOW, request, key, view, nonce)
        others = [
            session_ids.ForwardedRequest(method, path, query, session, body + b" "),
            session_ids.ForwardedRequest("PUT", path, query, session, body),
            session_ids.ForwardedRequest(method, path + "x", query, session, body),
            session_ids.ForwardedRequest(method, path, query + "&", session, body),
            session_ids.ForwardedRequest(method, path, query, session + "x", body),
        ]
        for candidate in [value, *tampered(value)]:
            for checked_for in [request, *others]:
                for now in (NOW, NOW + 4.2, NOW - 5.9, NOW + 6.1):
                    expected = session_ids.forwarded_check(candidate, now, checked_for, key)
                    shape = (checked_for.method, checked_for.path, checked_for.query, checked_for.session_id)
                    found = signer.check(candidate, now, shape, checked_for.body)
                    claim = session_ids.Forwarded(*found[:4]) if found is not None else None
                    assert claim == expected
                    if found is not None:
                        assert found.digest == body_digest(checked_for.body)
        assert Signer(key + b"!").check(value, NOW, (method, path, query, session), body) is None  # another key


def outcome(check: object, *args: object) -> object:
    """What a check answers, or the type of the error it raises."""
    try:
        return check(*args)  # type: ignore[operator]
    except ValueError as exc:
        return type(exc)


def test_odd_values_signed_by_hand_check_alike() -> None:
    """Values no forwarder makes, with a MAC that holds: a stamp in other digits (one int() reads, one it refuses:
    refused alike), a nonce and a principal that JSON escapes."""
    key = KEYS[1]
    method, path, query, session, body = REQUESTS[0]
    request = session_ids.ForwardedRequest(method, path, query, session, body)
    principal_b64 = session_ids._b64("\u00e9 \u2603".encode())
    odd = [
        (principal_b64, "i2", "\u0661\u0667\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660", "n", ""),
        (principal_b64, "i2", "\u00b2", "n", ""),
        (principal_b64, "i2", str(int(NOW)), 'n"\\\u00e9~', "3~ab"),
        ("not base64 \u2603", "i2", str(int(NOW)), "n", ""),
        (session_ids._b64(b"\xff\xfe"), "i2", str(int(NOW)), "n", ""),
    ]
    for fields in odd:
        good = ".".join((*fields, session_ids._forwarded_mac(key, fields, request)))
        for value in (good, good[:-1] + ("A" if good[-1] != "A" else "B")):  # its MAC, and a MAC that fails
            expected = outcome(session_ids.forwarded_check, value, NOW, request, key)
            found = outcome(Signer(key).check, value, NOW, (method, path, query, session), body)
            if isinstance(found, tuple):
                found = session_ids.Forwarded(*found[:4])
            assert found == expected, (fields, value)


def test_the_mac_is_hmac_sha256_cut() -> None:
    import hashlib
    import hmac

    for key in KEYS:
        for text in ("", "a", "\u2603" * 100, "x" * 1000):
            whole = hmac.digest(key, text.encode(), hashlib.sha256)
            assert Signer(key).mac(text) == session_ids._b64(whole[: session_ids.MAC_BYTES])


def test_a_checked_body_reads_as_its_bytes() -> None:
    body = b'{"a":1}'
    checked = CheckedBody(body, body_digest(body))
    assert checked.tell() == 0 and checked.read() == body and checked.body is body
    assert checked.digest == body_digest(body)
