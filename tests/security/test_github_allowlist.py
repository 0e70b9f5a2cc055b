"""Issue 20, finding 14: with the GitHub preset, MCPGATE_OAUTH_UPSTREAM_ALLOWED matched a bare number both as a
login and as an account id, so an entry naming an all-digit login also let in the account whose numeric id it
happened to be. An id now counts only as github:<id>.

Unit-level on the matching (upstream.github_identity, what GitHub's /user answer becomes, and upstream.permitted,
the allowlist check the callback applies): a real GitHub cannot run here, and the in-process stand-in of
tests/serve/test_oauth_upstream.py drives the same two functions.
"""

from __future__ import annotations

from mcpgate.serve.oauth import upstream

FRIEND = {"id": 7_301_455, "login": "1024"}  # an all-digit login, the one the operator means
STRANGER = {"id": 1024, "login": "someone-else"}  # an old account whose numeric id is 1024


def test_an_all_digit_login_on_the_list_does_not_let_in_the_account_with_that_id() -> None:
    allowed = ["1024"]
    assert upstream.permitted(upstream.github_identity(FRIEND, []), allowed)
    assert not upstream.permitted(upstream.github_identity(STRANGER, []), allowed)


def test_an_account_id_counts_only_in_the_github_form() -> None:
    stranger = upstream.github_identity(STRANGER, [])
    assert upstream.permitted(stranger, ["github:1024"])
    assert not upstream.permitted(upstream.github_identity(FRIEND, []), ["github:1024"])  # a login is not an id
    assert stranger.subjects == {"github:1024"}  # the only spelling of the id that matches
