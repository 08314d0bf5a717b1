"""The progress endpoint: workers POST their progress, the operator checks who they are.

    POST /apis/ringmaster.dev/v1alpha1/namespaces/{namespace}/trainingjobs/{name}/progress
    Authorization: Bearer <the pod's projected token, audience ringmaster.dev/trainingjobs/NS/NAME>

Authentication follows Kubeflow Trainer's progress design (kubeflow/trainer,
docs/proposals/2779-trainjob-progress): the API server vouches for the token in a TokenReview
for the URL's job's audience, and the pod the token was issued to (its ``pod-name`` claim)
must be a worker of that job. The ServiceAccount needs no RBAC at all.

Answers: 202 accepted; 400 a bad body (the message says what); 401 no token, or one the API
server does not vouch for this job's audience (a token for another job, or for none); 403 a
valid token of a pod that is not this job's worker; 404 no such TrainingJob; 413 a body over
MAX_BODY_BYTES (1.5 MiB: the largest report the schema admits), declared so in Content-Length
(refused before reading) or found so while reading a chunked one; 429 over the job's rate
(Retry-After says when); 503 the API server could not be asked.

The body is read whole (it may arrive in many pieces, with a Content-Length or chunked) and
at most MAX_BODY_BYTES + 1 bytes of it: a larger one is refused without being held.

Every refusal is counted in ``ringmaster_progress_reports_refused_total`` (by job, code and
reason); the log warns at most once a minute per job, code and reason, saying how many were
refused since its last warning (the others at debug level).

TokenReviews are cached by the token's hash (a pod reports with the same token for most of
an hour), and cache misses pass a global rate, so a flood of forged tokens costs the API
server at most REVIEWS_PER_SECOND.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import os
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from ringmaster import metrics
from ringmaster.admission.snapshot import Key
from ringmaster.manifests.progress import audience
from ringmaster.observe.reports import MAX_BODY_BYTES, ProgressReport, ReportRefused, parse_report

log = logging.getLogger(__name__)

PORT_ENV = "RINGMASTER_PROGRESS_PORT"
TLS_CERT_ENV = "RINGMASTER_PROGRESS_TLS_CERT"
TLS_KEY_ENV = "RINGMASTER_PROGRESS_TLS_KEY"
INSECURE_ENV = "RINGMASTER_PROGRESS_INSECURE_HTTP"
ROUTE = "/apis/ringmaster.dev/v1alpha1/namespaces/{namespace}/trainingjobs/{name}/progress"
RESULTS_ROUTE = "/apis/ringmaster.dev/v1alpha1/namespaces/{namespace}/poolprofiles/{name}/results"
POD_NAME_CLAIM = "authentication.kubernetes.io/pod-name"

REPORTS_PER_SECOND = 1.0
REPORT_BURST = 10
"""Per job: the client sends one report per 15 s by default, from rank 0; a burst of 10 lets a
few ranks or hosts report too. Beyond 1/s a job's status would be rewritten faster than anyone
reads it."""
REVIEWS_PER_SECOND = 20.0
REVIEW_BURST = 40
"""TokenReviews of tokens not in the cache, for all jobs together."""
REVIEW_CACHE_SECONDS = 300.0
"""A vouched-for token is trusted this long without asking again (a bound token of a deleted
pod is refused by the API server from then on; five minutes is the delay that bounds)."""
REFUSAL_CACHE_SECONDS = 30.0
LOG_EVERY_SECONDS = 60.0
"""A job's refusals of one code and reason: one warning a minute, saying how many since the last
(the counter ringmaster_progress_reports_refused_total counts every one)."""
MAX_LOGGED = 10_000
"""Jobs, codes and reasons whose last warning is remembered (a URL's names are anyone's)."""


class TokenBucket:
    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.rate, self.burst, self.clock = rate, burst, clock
        self.tokens, self.at = float(burst), clock()

    def take(self) -> float:
        """0 when a request may pass now, else the seconds until one may."""
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


@dataclass(frozen=True)
class Review:
    authenticated: bool
    namespace: str | None = None  # of the ServiceAccount
    pod: str | None = None
    error: str = ""


class Refusal(Exception):
    def __init__(self, code: int, reason: str, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.retry_after = code, reason, message, retry_after


class ProgressEndpoint:
    """The request handling, apart from the server: testable with a fake API and fake jobs."""

    def __init__(
        self,
        api: Any,
        job_exists: Callable[[Key], bool],
        workers_of: Callable[[Key], set[str]],
        accept: Callable[[Key, ProgressReport], None],
        clock: Callable[[], float] = time.monotonic,
        *,
        kind: str = "TrainingJob",
        member: str = "worker",
        audience_of: Callable[[str, str], str] = audience,
        parse: Callable[[Any, dt.datetime], Any] = parse_report,
        refused: type[Exception] = ReportRefused,
        accept_from: Callable[[Key, str, Any], None] | None = None,
    ) -> None:
        """``kind`` / ``member`` / ``audience_of`` / ``parse``: what the route takes (a
        TrainingJob's progress by default; a PoolProfile's results, poolprofile.py).
        ``accept_from`` gets the posting pod's name too."""
        self.kind, self.member, self.audience_of = kind, member, audience_of
        self.parse, self.refused, self.accept_from = parse, refused, accept_from
        self.api = api
        self.job_exists = job_exists
        self.workers_of = workers_of
        self.accept = accept
        self.clock = clock
        self.buckets: dict[Key, TokenBucket] = {}
        self.reviews = TokenBucket(REVIEWS_PER_SECOND, REVIEW_BURST, clock)
        self.cache: dict[tuple[str, str], tuple[float, Review]] = {}
        # (job, code, reason) -> (when it was last warned of, refusals since then)
        self.logged: dict[tuple[Key, int, str], tuple[float, int]] = {}

    async def handle(self, request: web.Request) -> web.Response:
        key = (request.match_info["namespace"], request.match_info["name"])
        try:
            await self._handle(key, request)
        except Refusal as refusal:
            return self._refuse(key, refusal)
        metrics.PROGRESS_REPORTS.labels("202").inc()
        return web.json_response({"status": "Accepted"}, status=202)

    async def _handle(self, key: Key, request: web.Request) -> None:
        if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
            raise Refusal(413, "TooLarge", f"body over {MAX_BODY_BYTES} bytes")
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer ") or not header[7:].strip():
            raise Refusal(401, "NoToken", "send the pod's projected token: Authorization: Bearer")
        if not self.job_exists(key):
            raise Refusal(404, "NotFound", f"no {self.kind} {key[0]}/{key[1]}")
        wanted = self.audience_of(*key)
        review = await self._review(header[7:].strip(), wanted)
        if not review.authenticated:
            raise Refusal(
                401,
                "TokenRefused",
                f"the API server does not vouch for this token for audience {wanted}"
                + (f": {review.error}" if review.error else ""),
            )
        if review.namespace != key[0] or review.pod is None:
            raise Refusal(403, "NotAPodToken", "the token is not bound to a pod of this namespace")
        if review.pod not in self.workers_of(key):
            raise Refusal(
                403,
                "NotAWorker",
                f"pod {review.pod} is not a {self.member} of {self.kind} {key[0]}/{key[1]}",
            )
        wait = self.buckets.setdefault(
            key, TokenBucket(REPORTS_PER_SECOND, REPORT_BURST, self.clock)
        ).take()
        if wait > 0:
            raise Refusal(429, "TooManyReports", "over the job's report rate", retry_after=wait)
        body = await read_body(request)
        try:
            report = self.parse(body, dt.datetime.now(dt.UTC))
        except self.refused as error:
            raise Refusal(400, "BadReport", str(error)) from None
        if self.accept_from is not None:
            self.accept_from(key, review.pod, report)
        else:
            self.accept(key, report)

    async def _review(self, token: str, wanted: str) -> Review:
        digest = hashlib.sha256(token.encode()).hexdigest()
        cached = self.cache.get((digest, wanted))
        now = self.clock()
        if cached is not None and cached[0] > now:
            return cached[1]
        wait = self.reviews.take()
        if wait > 0:
            raise Refusal(429, "TooManyReviews", "too many new tokens at once", retry_after=wait)
        try:
            status = await self.api.review_token(token, [wanted])
        except Exception as error:
            raise Refusal(503, "ReviewFailed", f"the TokenReview failed: {error}") from None
        review = _review_from(status, wanted)
        ttl = REVIEW_CACHE_SECONDS if review.authenticated else REFUSAL_CACHE_SECONDS
        if len(self.cache) > 10_000:
            self.cache = {k: v for k, v in self.cache.items() if v[0] > now}
        self.cache[(digest, wanted)] = (now + ttl, review)
        return review

    def _refuse(self, key: Key, refusal: Refusal) -> web.Response:
        metrics.PROGRESS_REPORTS.labels(str(refusal.code)).inc()
        # A URL's names are anyone's to choose: only a TrainingJob's own become labels.
        job = key if self.job_exists(key) else ("", "")
        metrics.PROGRESS_REPORTS_REFUSED.labels(*job, str(refusal.code), refusal.reason).inc()
        self._log(key, refusal)
        headers = {}
        if refusal.retry_after is not None:
            headers["Retry-After"] = str(max(1, round(refusal.retry_after + 0.5)))
        return web.json_response(
            {"status": "Failure", "reason": refusal.reason, "message": refusal.message},
            status=refusal.code,
            headers=headers,
        )

    def _log(self, key: Key, refusal: Refusal) -> None:
        seen, now = (key, refusal.code, refusal.reason), self.clock()
        line = ("progress of %s/%s refused (%d %s): %s", *key, refusal.code, refusal.reason)
        last = self.logged.get(seen)
        if last is not None and now - last[0] < LOG_EVERY_SECONDS:
            self.logged[seen] = (last[0], last[1] + 1)
            log.debug(*line, refusal.message)
            return
        if last is None and len(self.logged) >= MAX_LOGGED:
            self.logged = {k: v for k, v in self.logged.items() if now - v[0] < LOG_EVERY_SECONDS}
            if len(self.logged) >= MAX_LOGGED:  # a flood of distinct URLs: the counter has them
                log.debug(*line, refusal.message)
                return
        self.logged[seen] = (now, 0)
        since = f" ({last[1]} more refused since the last warning)" if last and last[1] else ""
        log.warning(*line, refusal.message + since)

    def forget(self, key: Key) -> None:
        self.buckets.pop(key, None)


async def read_body(request: web.Request) -> bytes:
    """The request's whole body, however it arrives (Content-Length or chunked, aiohttp's
    stream decodes either, in as many pieces as the network makes): a single ``read`` returns
    only what has arrived so far. At most MAX_BODY_BYTES + 1 bytes are read: a larger body is
    refused (413) without being held."""
    body = bytearray()
    try:
        while len(body) <= MAX_BODY_BYTES:
            piece = await request.content.read(MAX_BODY_BYTES + 1 - len(body))
            if not piece:
                break
            body += piece
    except HttpProcessingError as error:  # a bad chunk, or the sender gone before its end
        raise Refusal(400, "BadBody", f"the body could not be read: {error.message}") from None
    if len(body) > MAX_BODY_BYTES:
        raise Refusal(413, "TooLarge", f"body over {MAX_BODY_BYTES} bytes")
    return bytes(body)


def _review_from(status: Mapping[str, Any], wanted: str) -> Review:
    if not status.get("authenticated"):
        return Review(False, error=str(status.get("error") or ""))
    # An API server that ignores audiences answers with none: it did not check ours.
    if wanted not in (status.get("audiences") or []):
        return Review(False, error="the API server did not confirm the audience")
    user = status.get("user") or {}
    parts = str(user.get("username") or "").split(":")
    namespace = parts[2] if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"] else None
    pods = (user.get("extra") or {}).get(POD_NAME_CLAIM) or []
    return Review(True, namespace, pods[0] if pods else None)


# ---------------------------------------------------------------- the server


def ssl_context(cert: str | None, key: str | None, insecure: bool) -> ssl.SSLContext | None:
    """TLS from the chart's certificate; plain HTTP only when asked for by name."""
    if cert and key:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        return context
    if insecure:
        return None
    raise ValueError(
        f"the progress endpoint needs a certificate ({TLS_CERT_ENV}, {TLS_KEY_ENV}), "
        f"or {INSECURE_ENV}=true for plain HTTP (docs/progress.md)"
    )


def make_app(
    endpoint: ProgressEndpoint, results: ProgressEndpoint | None = None
) -> web.Application:
    # read_body bounds the body itself; client_max_size bounds request.read() and post() too.
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_post(ROUTE, endpoint.handle)
    if results is not None:
        app.router.add_post(RESULTS_ROUTE, results.handle)
    return app


async def serve(
    endpoint: ProgressEndpoint,
    port: int,
    context: ssl.SSLContext | None,
    host: str = "0.0.0.0",
    results: ProgressEndpoint | None = None,
) -> web.AppRunner:
    """Serve on ``port`` (0: any free one, ``runner.addresses`` says which)."""
    runner = web.AppRunner(make_app(endpoint, results), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=context)
    await site.start()
    log.info("progress endpoint on port %d (%s)", port, "https" if context else "plain http")
    return runner


def settings_from_environment() -> tuple[int, ssl.SSLContext | None] | None:
    port = int(os.environ.get(PORT_ENV) or 0)
    if not port:
        return None
    insecure = (os.environ.get(INSECURE_ENV) or "").lower() in ("1", "true", "yes")
    context = ssl_context(os.environ.get(TLS_CERT_ENV), os.environ.get(TLS_KEY_ENV), insecure)
    return port, context


async def start_for(controller: Any) -> web.AppRunner | None:
    """Serve the endpoint for the TrainingJob controller, if a port is configured."""
    settings = settings_from_environment()
    if settings is None:
        return None

    def job_exists(key: Key) -> bool:
        return bool(controller.indexes) and bool(controller.objects().get(key))

    def workers_of(key: Key) -> set[str]:
        from ringmaster.controllers.cluster_state import worker_pods

        return (
            {pod.name for pod in worker_pods(controller.indexes, key)}
            if controller.indexes
            else set()
        )

    endpoint = ProgressEndpoint(controller.api, job_exists, workers_of, controller.observer.accept)
    return await serve(endpoint, *settings, results=profile_results_endpoint(controller.api))


def profile_results_endpoint(api: Any) -> ProgressEndpoint:
    """The PoolProfile results route (issue 47): the same checks, for a profile's own pods."""
    from ringmaster.controllers import poolprofile
    from ringmaster.manifests.profiling import audience as profile_audience
    from ringmaster.profiling.results import ResultRefused, parse_result

    # Looked up per request: the controllers start in any order.
    def exists(key: Key) -> bool:
        return poolprofile.CONTROLLER is not None and poolprofile.CONTROLLER.profile_exists(key)

    def pods_of(key: Key) -> set[str]:
        return poolprofile.CONTROLLER.pods_of(key) if poolprofile.CONTROLLER else set()

    def accept_from(key: Key, pod: str, result: Any) -> None:
        if poolprofile.CONTROLLER is not None:
            poolprofile.CONTROLLER.accept(key, pod, result)

    return ProgressEndpoint(
        api,
        exists,
        pods_of,
        lambda key, report: None,
        kind="PoolProfile",
        member="measurement pod of the current run",
        audience_of=profile_audience,
        parse=parse_result,
        refused=ResultRefused,
        accept_from=accept_from,
    )


async def stop(runner: web.AppRunner | None) -> None:
    if runner is not None:
        await asyncio.shield(runner.cleanup())
