"""What every test runner under tests/ raises and checks with: one Failure
(a check that did not hold), one Skip (the case cannot run here: a part not
built, an environment missing), and check()."""


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)
