"""The deploy rehearsal's machinery: a stack on moto's server, its functions run as deployed.

A stack (SAM's translation of template.yaml, prepared for moto by the caller) is created on a
moto server; each function is read back through moto's Lambda, IAM and event-source-mapping
APIs (:class:`DeployedFunction`), and run in a child process of its own
(:class:`LambdaContainer`, devtools/lambda_runtime.py) with exactly the environment read back.
Only these are added, as Lambda adds them or because the emulators need them:

- what Lambda's runtime sets: ``AWS_REGION``, ``AWS_DEFAULT_REGION``, ``_HANDLER``,
  ``AWS_LAMBDA_FUNCTION_NAME`` / ``_VERSION`` / ``_MEMORY_SIZE``, the role's credentials
  (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``), here an IAM user's (:func:`create_principal`),
  and ``AWS_LAMBDA_INITIALIZATION_TYPE=snap-start`` for a function with SnapStart (its
  container then runs the SnapStart hooks after init, devtools/lambda_runtime.py);
- endpoints: ``AWS_ENDPOINT_URL`` (the moto server) and, with a cache, the stack's
  ``rediss://`` URL pointed at the local TLS redis-server, whose private CA is in
  ``SSL_CERT_FILE``;
- no AWS configuration files and no instance metadata lookups.

moto enforces IAM once :func:`enforce_iam` is called, on actions only: a statement scoped to an
ARN denies (moto authorises against ``*``) and conditions are ignored, so each function's
principal holds its role's statements with ``Resource`` widened to ``*``; resources and
condition keys are checked statically by the tests.

moto's CloudFormation makes no ``AWS::CloudWatch::Alarm``: :func:`put_alarms` makes each of
the stack's alarms through moto's PutMetricAlarm, its properties resolved as CloudFormation
resolves them, so that the alarms can be read back (DescribeAlarms) like the other resources.

A function's log is what it printed, as CloudWatch would keep it. :func:`breaker_problems`
finds in it what must fail a rehearsal: a store error or a switch to the local breaker.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools.sam_template import PSEUDO_PARAMETERS, take_branches
from devtools.servers import (
    LOOPBACK,
    REGION,
    REPO_ROOT,
    MotoServer,
    TlsRedisServer,
)

ADMIN_USER = "rehearsal-admin"
INIT_TIMEOUT = 60.0  # seconds for a function's init (imports) on a busy 2-core machine
INVOKE_TIMEOUT = 60.0
# The variables a rehearsal adds to a function's own (see the module docstring).
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL", "SSL_CERT_FILE")
SANDBOX_VARIABLES = {
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}


class RehearsalError(AssertionError):
    """A function does not run as deployed; the message names the function and the cause."""


# --------------------------------------------------------------------------- moto


class RehearsalMotoServer(MotoServer):
    """moto's server with DynamoDB serialised and layer versions given their ARN as id."""

    name = "moto-rehearsal"

    def command(self) -> Sequence[str]:
        launcher = str(Path(__file__).with_name("moto_rehearsal_server.py"))
        return [sys.executable, launcher, LOOPBACK, str(self.port)]


@dataclass(frozen=True)
class Credentials:
    access_key_id: str
    secret_access_key: str


# One session for every client the rehearsal makes (each names its keys, region and endpoint):
# a session per client set up botocore's handlers and read its data files again each time.
# 160 clients, as a run of tests/rehearsal makes, took 11 s of CPU under coverage that way
# (2.7 s with the data files read once, devtools/botocore_data.py), 0.8 s from one session.
# A session is not thread-safe: clients are made under the lock, and used freely.
_SESSION: list[Any] = []
_SESSION_LOCK = threading.Lock()


def client(endpoint_url: str, service: str, credentials: Credentials | None = None) -> Any:
    import boto3
    from botocore.config import Config

    keys = credentials or Credentials("testing", "testing")
    with _SESSION_LOCK:
        if not _SESSION:
            _SESSION.append(boto3.session.Session())
        return _SESSION[0].client(
            service,
            endpoint_url=endpoint_url,
            region_name=REGION,
            aws_access_key_id=keys.access_key_id,
            aws_secret_access_key=keys.secret_access_key,
            config=Config(retries={"max_attempts": 1}, read_timeout=30),
        )


def create_user(
    endpoint_url: str, user: str, statements: list[dict[str, Any]], as_: Credentials | None
) -> Credentials:
    """An IAM user holding ``statements`` (as one inline policy), and its access key."""
    iam = client(endpoint_url, "iam", as_)
    iam.create_user(UserName=user)
    if statements:
        iam.put_user_policy(
            UserName=user,
            PolicyName="role-statements",
            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}),
        )
    key = iam.create_access_key(UserName=user)["AccessKey"]
    return Credentials(key["AccessKeyId"], key["SecretAccessKey"])


def create_admin(endpoint_url: str) -> Credentials:
    """The deployer: everything allowed. Create it before :func:`enforce_iam`."""
    return create_user(
        endpoint_url, ADMIN_USER, [{"Effect": "Allow", "Action": "*", "Resource": "*"}], None
    )


def enforce_iam(endpoint_url: str) -> None:
    """From now on moto authenticates and authorises every request (INITIAL_NO_AUTH_ACTION_COUNT
    set to 0 through moto's API)."""
    request = urllib.request.Request(
        f"{endpoint_url}/moto-api/reset-auth",
        data=b"0",
        method="POST",
        # Not a form: moto reads the raw body, which werkzeug empties for form data.
        headers={"Content-Type": "text/plain"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200, answer.read()


def _references(value: Any, conditions: Mapping[str, bool]) -> set[str]:
    """The names a template value refers to (Ref, Fn::GetAtt, ${...} of Fn::Sub), in the
    branches of Fn::If its conditions take."""
    if isinstance(value, list):
        return set().union(*(_references(item, conditions) for item in value))
    if not isinstance(value, dict):
        return set()
    if set(value) == {"Fn::If"}:
        condition, when_true, when_false = value["Fn::If"]
        return _references(when_true if conditions[condition] else when_false, conditions)
    if set(value) == {"Ref"} and isinstance(value["Ref"], str):
        return {value["Ref"]}
    if set(value) == {"Fn::GetAtt"}:
        target = value["Fn::GetAtt"]
        return {(target if isinstance(target, list) else target.split("."))[0]}
    if set(value) == {"Fn::Sub"}:
        argument = value["Fn::Sub"]
        text, variables = (argument, {}) if isinstance(argument, str) else argument
        names = {name.split(".")[0] for name in re.findall(r"\$\{([^}!]+)\}", text)}
        return (names - set(variables)) | _references(variables, conditions)
    return set().union(*(_references(item, conditions) for item in value.values()))


def dependency_cycle(
    template: Mapping[str, Any], conditions: Mapping[str, bool]
) -> list[str] | None:
    """A cycle of resources that depend on each other (CloudFormation refuses to create the
    stack; moto's CloudFormation recurses until it fails), or None. ``conditions``: the
    template's conditions evaluated for the stack's parameters."""
    resources = {
        name: resource
        for name, resource in template["Resources"].items()
        if conditions.get(resource.get("Condition", ""), True)
    }
    edges = {
        name: sorted(
            (_references(resource.get("Properties", {}), conditions) | set(_depends_on(resource)))
            & set(resources)
        )
        for name, resource in resources.items()
    }
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done:
            return None
        for target in edges[name]:
            cycle = visit(target, [*path, name])
            if cycle:
                return cycle
        done.add(name)
        return None

    for name in resources:
        cycle = visit(name, [])
        if cycle:
            return cycle
    return None


def _depends_on(resource: Mapping[str, Any]) -> list[str]:
    depends = resource.get("DependsOn", [])
    return [depends] if isinstance(depends, str) else list(depends)


def create_stack(
    endpoint_url: str,
    admin: Credentials,
    stack: str,
    template: Mapping[str, Any],
    parameters: Mapping[str, str],
    code: Mapping[str, bytes],
    conditions: Mapping[str, bool],
) -> None:
    """Upload the code objects the template's S3 locations name, then create the stack.
    ``conditions``: the template's conditions for ``parameters`` (for the cycle check)."""
    cycle = dependency_cycle(template, conditions)
    if cycle:
        raise RehearsalError(
            f"stack {stack}: circular dependency between resources: {' -> '.join(cycle)}"
        )
    s3 = client(endpoint_url, "s3", admin)
    for location, body in code.items():
        bucket, _, key = location.removeprefix("s3://").partition("/")
        with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
            s3.create_bucket(Bucket=bucket)
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    cloudformation = client(endpoint_url, "cloudformation", admin)
    cloudformation.create_stack(
        StackName=stack,
        TemplateBody=json.dumps(template),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
        Capabilities=["CAPABILITY_IAM"],
    )
    status = cloudformation.describe_stacks(StackName=stack)["Stacks"][0]["StackStatus"]
    if status != "CREATE_COMPLETE":
        raise RehearsalError(f"stack {stack}: {status}")


# moto's CloudFormation has no AWS::CloudWatch::Alarm; its CloudWatch has PutMetricAlarm.
ALARM_INTEGERS = ("EvaluationPeriods", "DatapointsToAlarm")


def _resolved(value: Any, values: Mapping[str, str]) -> Any:
    """``value`` with each ``Ref`` and ``${name}`` of a parameter or pseudo parameter filled in
    (the alarms' properties use no other function once :func:`take_branches` has run)."""
    if isinstance(value, list):
        return [_resolved(item, values) for item in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"Ref"}:
        return values[value["Ref"]]
    if set(value) == {"Fn::Sub"} and isinstance(value["Fn::Sub"], str):
        return re.sub(r"\$\{([A-Za-z0-9:]+)\}", lambda m: values[m.group(1)], value["Fn::Sub"])
    unknown = [key for key in value if key.startswith("Fn::")]
    if unknown:
        raise RehearsalError(f"an alarm property the rehearsal cannot resolve: {unknown}")
    return {key: _resolved(item, values) for key, item in value.items()}


def put_alarms(
    endpoint_url: str,
    admin: Credentials,
    stack: str,
    translated: Mapping[str, Any],
    parameters: Mapping[str, str],
    conditions: Mapping[str, bool],
) -> dict[str, str]:
    """Make each alarm of the stack as CloudFormation would: PutMetricAlarm with its
    properties resolved for ``parameters`` (its conditions' branches taken, parameters and
    pseudo parameters filled in, numbers as the API types them), named ``<stack>-<logical
    id>``. {logical id: alarm name}; the API's own validation refuses a malformed alarm."""
    values = {
        **PSEUDO_PARAMETERS,
        "AWS::StackName": stack,
        **{name: str(p.get("Default", "")) for name, p in translated["Parameters"].items()},
        **parameters,
    }
    cloudwatch = client(endpoint_url, "cloudwatch", admin)
    made = {}
    for logical_id, resource in translated["Resources"].items():
        if resource["Type"] != "AWS::CloudWatch::Alarm":
            continue
        if not conditions.get(resource.get("Condition", ""), True):
            continue
        try:
            properties = _resolved(take_branches(resource["Properties"], conditions), values)
        except RehearsalError as exc:
            raise RehearsalError(f"stack {stack}, alarm {logical_id}: {exc}") from None
        for key in ALARM_INTEGERS:
            properties[key] = int(properties[key])
        properties["Threshold"] = float(properties["Threshold"])
        for query in properties.get("Metrics", []):
            query["Period"] = int(query["Period"])
        name = f"{stack}-{logical_id}"
        cloudwatch.put_metric_alarm(AlarmName=name, **properties)
        made[logical_id] = name
    return made


# --------------------------------------------------------------------------- read back


def policy_document(document: Any) -> dict[str, Any]:
    """A policy document as moto returns it: JSON, a dict, or, for a role's inline policy
    created through CloudFormation, the dict's Python repr (AWS::NoValue left as None)."""
    import ast

    if isinstance(document, str):
        try:
            document = json.loads(document)
        except ValueError:
            document = ast.literal_eval(document)
    statements = document["Statement"]
    statements = [statements] if isinstance(statements, dict) else statements
    return {**document, "Statement": [s for s in statements if s is not None]}


@dataclass
class DeployedFunction:
    """One function as the stack created it, read back through the AWS APIs."""

    logical_id: str
    name: str
    arn: str
    handler: str
    runtime: str
    memory_size: int
    environment: dict[str, str]
    layers: list[str]
    vpc: dict[str, Any]
    role_name: str
    statements: list[dict[str, Any]]
    managed_policies: list[str]
    mappings: list[dict[str, Any]] = field(default_factory=list)


def stack_resources(endpoint_url: str, admin: Credentials, stack: str) -> dict[str, str]:
    """{logical id: physical id} of the stack's created resources."""
    cloudformation = client(endpoint_url, "cloudformation", admin)
    summaries = cloudformation.list_stack_resources(StackName=stack)["StackResourceSummaries"]
    return {
        r["LogicalResourceId"]: r["PhysicalResourceId"] for r in summaries if r["LogicalResourceId"]
    }


def read_functions(
    endpoint_url: str, admin: Credentials, stack: str
) -> dict[str, DeployedFunction]:
    """Every function of the stack: configuration, role and its policies, mappings."""
    cloudformation = client(endpoint_url, "cloudformation", admin)
    lambda_ = client(endpoint_url, "lambda", admin)
    iam = client(endpoint_url, "iam", admin)
    summaries = cloudformation.list_stack_resources(StackName=stack)["StackResourceSummaries"]
    functions = {}
    for summary in summaries:
        if summary["ResourceType"] != "AWS::Lambda::Function":
            continue
        configuration = lambda_.get_function(FunctionName=summary["PhysicalResourceId"])[
            "Configuration"
        ]
        role_name = configuration["Role"].rsplit("/", 1)[-1]
        statements: list[dict[str, Any]] = []
        for policy in iam.list_role_policies(RoleName=role_name)["PolicyNames"]:
            document = iam.get_role_policy(RoleName=role_name, PolicyName=policy)
            statements.extend(policy_document(document["PolicyDocument"])["Statement"])
        attached = iam.list_attached_role_policies(RoleName=role_name)["AttachedPolicies"]
        mappings = lambda_.list_event_source_mappings(FunctionName=configuration["FunctionName"])
        functions[summary["LogicalResourceId"]] = DeployedFunction(
            logical_id=summary["LogicalResourceId"],
            name=configuration["FunctionName"],
            arn=configuration["FunctionArn"],
            handler=configuration["Handler"],
            runtime=configuration["Runtime"],
            memory_size=int(configuration.get("MemorySize", 128)),
            # CloudFormation hands Lambda strings; moto keeps the template's numbers.
            environment={
                k: str(v)
                for k, v in configuration.get("Environment", {}).get("Variables", {}).items()
            },
            layers=[layer["Arn"] for layer in configuration.get("Layers", [])],
            vpc=configuration.get("VpcConfig", {}),
            role_name=role_name,
            statements=statements,
            managed_policies=sorted(p["PolicyArn"] for p in attached),
            mappings=mappings["EventSourceMappings"],
        )
    return functions


def create_principal(
    endpoint_url: str, admin: Credentials, function: DeployedFunction
) -> Credentials:
    """An IAM user holding exactly the function's role statements, Resource widened to "*"
    and conditions dropped (moto's authoriser sees "*" and ignores conditions)."""
    statements = [
        {"Effect": s["Effect"], "Action": s["Action"], "Resource": "*"} for s in function.statements
    ]
    return create_user(endpoint_url, f"role-{function.logical_id}", statements, admin)


# --------------------------------------------------------------------------- the cache


class ElastiCacheLikeRedis(TlsRedisServer):
    """A TLS-only redis-server with the access rules of the stack's cache.

    The ``default`` user is off (ElastiCache's user group holds no default user), the only
    user the functions can log in as is the cache's IAM user with the template's access
    string, and an admin user exists for the test's own reads. redis-server cannot check an
    IAM token's SigV4 signature, so the IAM user takes any password (``nopass``): a client
    gets in only by logging in as that user, which is what the functions' configuration decides.
    """

    name = "redis-elasticache"
    ADMIN_PASSWORD = "rehearsal-admin-secret"

    def __init__(
        self, ca: Path, cert: Path, key: Path, *, iam_user: str, access_string: Sequence[str]
    ) -> None:
        super().__init__(ca, cert, key)
        self.iam_user = iam_user
        self.access_string = list(access_string)

    def command(self) -> Sequence[str]:
        return [
            *super().command(),
            "--user",
            "default",
            "off",
            "--user",
            ADMIN_USER,
            "on",
            f">{self.ADMIN_PASSWORD}",
            "~*",
            "&*",
            "+@all",
            "--user",
            self.iam_user,
            "on",
            "nopass",
            *self.access_string,
        ]

    def is_ready(self) -> bool:
        return self.admin_client().ping() is True

    def admin_client(self) -> Any:
        import redis

        return redis.Redis(
            host=LOOPBACK,
            port=self.port,
            username=ADMIN_USER,
            password=self.ADMIN_PASSWORD,
            ssl=True,
            ssl_ca_certs=str(self.ca),
            socket_timeout=5,
        )

    def clients(self) -> list[str]:
        """The user name of each connected client."""
        listing = self.admin_client().execute_command("CLIENT", "LIST")
        text = listing.decode() if isinstance(listing, bytes) else str(listing)
        return re.findall(r"\buser=(\S+)", text)


def local_cache_url(stack_url: str, cache: TlsRedisServer) -> str:
    """The stack's ``rediss://host:port`` URL with host and port of the local cache."""
    match = re.fullmatch(r"(rediss?)://[^/]*(/.*)?", stack_url)
    if match is None:
        raise RehearsalError(f"CIRCUIT_BREAKER_REDIS_URL {stack_url!r} is not a Redis URL")
    return f"{match.group(1)}://{LOOPBACK}:{cache.port}{match.group(2) or ''}"


# --------------------------------------------------------------------------- containers


def container_environment(
    function: DeployedFunction,
    credentials: Credentials,
    endpoint_url: str,
    cache: TlsRedisServer | None = None,
    *,
    snapstart: bool = False,
) -> dict[str, str]:
    """The function's environment as Lambda would give it, plus the endpoint variables.

    ``snapstart``: the function has SnapStart (moto reads it back as off whatever the
    template says), and its environments are restored from a snapshot: Lambda tells the
    runtime so (``AWS_LAMBDA_INITIALIZATION_TYPE``), which then runs the SnapStart hooks.
    """
    environment = dict(function.environment)
    added = {
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "_HANDLER": function.handler,
        "AWS_LAMBDA_FUNCTION_NAME": function.name,
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(function.memory_size),
        "AWS_ACCESS_KEY_ID": credentials.access_key_id,
        "AWS_SECRET_ACCESS_KEY": credentials.secret_access_key,
        "AWS_ENDPOINT_URL": endpoint_url,
        **SANDBOX_VARIABLES,
    }
    if snapstart:
        added["AWS_LAMBDA_INITIALIZATION_TYPE"] = "snap-start"
    clash = sorted(set(added) & set(environment))
    if clash:
        raise RehearsalError(
            f"{function.logical_id}: the stack sets {clash}, which the rehearsal must add"
        )
    environment.update(added)
    url = environment.get("CIRCUIT_BREAKER_REDIS_URL")
    if url:
        if cache is None:
            raise RehearsalError(f"{function.logical_id}: a cache URL but no local cache")
        environment["CIRCUIT_BREAKER_REDIS_URL"] = local_cache_url(url, cache)
        environment["SSL_CERT_FILE"] = str(cache.ca)
    return environment


@dataclass
class Invocation:
    """One invocation's answer (or error) and the log lines it printed."""

    function: str
    result: Any = None
    error: dict[str, str] | None = None
    log: list[str] = field(default_factory=list)
    # Why the container's breaker still runs on local state after this invocation (it logs
    # the switch once, then runs locally in silence until the store answers again).
    still_local: str | None = None

    def records(self) -> list[dict[str, Any]]:
        """The JSON log lines (Powertools' structured logs, EMF)."""
        parsed = []
        for line in self.log:
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict):
                    parsed.append(record)
        return parsed

    def answer(self) -> Any:
        """The result; an error is a RehearsalError naming the function."""
        if self.error is not None:
            raise RehearsalError(
                f"{self.function} raised {self.error['type']}: {self.error['message']}\n"
                f"{self.error['traceback']}\nlog:\n" + "\n".join(self.log[-20:])
            )
        return self.result


def local_since(records: Iterable[Mapping[str, Any]], before: str | None) -> str | None:
    """The reason a breaker runs on local state after ``records`` (None once it recovered)."""
    reason = before
    for record in records:
        if record.get("breaker_event") == "degraded":
            reason = str(record.get("message"))
        elif record.get("breaker_event") == "recovered":
            reason = None
    return reason


def breaker_problems(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """What in a function's log says it did not run on the fleet's breaker."""
    problems = []
    for record in records:
        event = record.get("breaker_event")
        if event in ("store_error", "store_misconfigured", "degraded", "corrupt_record"):
            problems.append(f"{event}: {record.get('message')}")
    return problems


class LambdaContainer:
    """One execution environment of a deployed function: a child process, init then invokes."""

    def __init__(
        self, function: DeployedFunction, environment: Mapping[str, str], code_dir: Path
    ) -> None:
        self.function = function
        self.environment = dict(environment)
        self.code_dir = code_dir
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed in stop())
            prefix=f"{function.logical_id}-", suffix=".log", delete=False
        )
        self._log_offset = 0
        self._answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.proc: subprocess.Popen[bytes] | None = None
        self._local: str | None = None
        # When its last invocation ended (time.monotonic): the breaker view it read then stays
        # fresh for up to twice BREAKER_CACHE_TTL (Rehearsal.reset_breaker waits that out).
        self.last_invoked: float | None = None

    @property
    def logical_id(self) -> str:
        return self.function.logical_id

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def still_local(self) -> str | None:
        """Why its breaker runs on local state now (see :attr:`Invocation.still_local`)."""
        return self._local

    def start(self) -> LambdaContainer:
        """Start the process and wait for its init; an init failure is a RehearsalError."""
        read_fd, write_fd = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "devtools.lambda_runtime",
                    str(self.code_dir),
                    str(write_fd),
                ],
                stdin=subprocess.PIPE,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=self.environment,
                cwd=self.code_dir,
                pass_fds=(write_fd,),
                start_new_session=True,
            )
        finally:
            os.close(write_fd)
        reader = threading.Thread(target=self._read_answers, args=(read_fd,), daemon=True)
        reader.start()
        first = self._next_answer(INIT_TIMEOUT, "init")
        if "init_error" in first:
            error = first["init_error"]
            self.stop()
            raise RehearsalError(
                f"{self.logical_id}: init failed with {error['type']}: {error['message']}\n"
                f"{error['traceback']}"
            )
        return self

    def _read_answers(self, fd: int) -> None:
        with os.fdopen(fd, encoding="utf-8") as answers:
            for line in answers:
                self._answers.put(json.loads(line))
        self._answers.put(None)

    def _next_answer(self, timeout: float, what: str) -> dict[str, Any]:
        try:
            answer = self._answers.get(timeout=timeout)
        except queue.Empty:
            tail = self.log_tail()
            self.stop()
            raise RehearsalError(
                f"{self.logical_id}: no answer to {what} within {timeout:.0f} s\n{tail}"
            ) from None
        if answer is None:
            raise RehearsalError(
                f"{self.logical_id}: the process exited during {what}\n{self.log_tail()}"
            )
        return answer

    def invoke(self, event: Any) -> Invocation:
        assert self.proc is not None, "start() first"
        assert self.proc.stdin is not None
        context = {
            "function_name": self.function.name,
            "invoked_function_arn": self.function.arn,
            "memory_limit_in_mb": self.function.memory_size,
        }
        self.proc.stdin.write(json.dumps({"event": event, "context": context}).encode() + b"\n")
        self.proc.stdin.flush()
        answer = self._next_answer(INVOKE_TIMEOUT, "an invocation")
        self.last_invoked = time.monotonic()
        invocation = Invocation(
            self.logical_id, answer.get("result"), answer.get("error"), self._new_log_lines()
        )
        self._local = invocation.still_local = local_since(invocation.records(), self._local)
        return invocation

    def _new_log_lines(self) -> list[str]:
        with open(self._log.name, encoding="utf-8", errors="replace") as log:
            log.seek(self._log_offset)
            text = log.read()
            self._log_offset = log.tell()
        return text.splitlines()

    def log_tail(self, lines: int = 40) -> str:
        text = Path(self._log.name).read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    self.proc.stdin.close()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        self._log.close()
        with contextlib.suppress(OSError):
            os.unlink(self._log.name)

    def __enter__(self) -> LambdaContainer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def code_dir(code_uri: str) -> Path:
    """A function's code directory in the repository (the template's CodeUri)."""
    return REPO_ROOT / code_uri
