"""Development tools shared by tests/, bench/ and scripts/ (never shipped in the layer).

- :mod:`devtools.servers`: moto's server (behind :mod:`devtools.moto_atomic_server`'s lock),
  dynalite and redis-server on free loopback ports, and fault helpers.
- :mod:`devtools.payment_api`: the fake payment provider (``FakePaymentApi``).
- :mod:`devtools.lambda_context`: the fake Lambda context (``FakeLambdaContext``).
- :mod:`devtools.functions`: imports functions/<name>/app.py as Lambda does (``load_function``).

Importable from the repository root, which pytest, ``python -m bench.demo`` and the scripts put
on ``sys.path``; ``make venv`` also adds the root to the venv (``fleetbreaker-dev.pth``).
"""
