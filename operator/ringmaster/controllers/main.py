"""`ringmaster run`: the operator process."""

from __future__ import annotations

import argparse
import logging
import os
import random


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        dest="namespaces",
        help="watch this namespace (repeatable; glob patterns as kopf accepts); default: all",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=8080,
        help="serve Prometheus metrics on this port, 0 to disable (default %(default)s)",
    )
    parser.add_argument(
        "--liveness",
        metavar="URL",
        default=None,
        help="serve kopf's liveness probe, e.g. http://0.0.0.0:8081/healthz",
    )
    parser.add_argument(
        "--peering",
        metavar="NAME",
        default=None,
        help="run as one of several replicas, only one active (kopf peering object NAME); "
        "default: standalone",
    )
    parser.add_argument(
        "--priority",
        type=int,
        default=None,
        help="peering priority (the highest active replica works, the others wait); "
        "default: random, because kopf pauses every replica when the highest priority is shared",
    )
    parser.add_argument(
        "--queueing",
        choices=("BestEffortFIFO", "StrictFIFO"),
        default=None,
        help="how waiting TrainingJob gangs queue (docs/architecture.md): BestEffortFIFO lets "
        "a gang that fits pass one that does not, for at most --bypass-limit seconds; "
        "StrictFIFO never does. Default: $RINGMASTER_QUEUEING or BestEffortFIFO",
    )
    parser.add_argument(
        "--bypass-limit",
        type=float,
        default=None,
        metavar="SECONDS",
        help="BestEffortFIFO: how long later gangs may start ahead of one that does not fit "
        "(default: $RINGMASTER_BYPASS_LIMIT_SECONDS or 300)",
    )
    parser.add_argument(
        "--kueue",
        choices=("auto", "off"),
        default=None,
        help="auto: TrainingJobs labelled kueue.x-k8s.io/queue-name are admitted by Kueue "
        "whenever its Workload CRD is served (Workloads are watched from the moment it is), if "
        "the operator may watch them (checked at start); off: the label is ignored and "
        "nothing of Kueue is watched (no RBAC for it needed). "
        "Default: $RINGMASTER_KUEUE or auto",
    )
    parser.add_argument(
        "--lws",
        choices=("auto", "off"),
        default=None,
        help="auto: an InferenceEndpoint whose replicas span hosts runs as a LeaderWorkerSet "
        "whenever its CRD is served, if the operator may manage LeaderWorkerSets (checked at "
        "start); off: such endpoints wait with LeaderWorkerSetNotInstalled (no RBAC for it "
        "needed). Default: $RINGMASTER_LWS or auto",
    )
    parser.add_argument(
        "--catalog-configmap",
        metavar="NAMESPACE/NAME",
        default=None,
        help="the hardware catalog ConfigMap (key catalog.yaml, docs/catalog.md), re-read while "
        "the operator runs; default: $RINGMASTER_CATALOG_CONFIGMAP, or none (the built-in "
        "catalog, plus the file $RINGMASTER_CATALOG)",
    )
    progress = parser.add_argument_group("progress reports (docs/progress.md)")
    progress.add_argument(
        "--progress-port",
        type=int,
        default=None,
        help="serve the workers' progress endpoint on this port, 0 for none "
        "(default: $RINGMASTER_PROGRESS_PORT or 0)",
    )
    progress.add_argument(
        "--progress-url",
        metavar="URL",
        default=None,
        help="the endpoint as worker pods reach it, e.g. https://ringmaster.ringmaster.svc:8443: "
        "pods get it and a token for it (default: $RINGMASTER_PROGRESS_URL)",
    )
    progress.add_argument("--progress-tls-cert", metavar="FILE", default=None)
    progress.add_argument("--progress-tls-key", metavar="FILE", default=None)
    progress.add_argument(
        "--progress-tls-ca",
        metavar="FILE",
        default=None,
        help="the CA of the certificate, handed to the pods to check it",
    )
    progress.add_argument(
        "--progress-insecure-http",
        action="store_true",
        help="serve plain HTTP (a cluster without a certificate: tokens cross the pod network "
        "in clear)",
    )
    progress.add_argument(
        "--calibration-configmap",
        metavar="NAMESPACE/NAME",
        default=None,
        help="keep the cluster's calibration (finished jobs' observed/predicted) in this "
        "ConfigMap (default: $RINGMASTER_CALIBRATION_CONFIGMAP, or in memory only)",
    )
    parser.add_argument("-v", "--verbose", action="store_true")


def run(args: argparse.Namespace) -> int:
    import kopf
    from kopf._cogs.structs.references import Insights
    from prometheus_client import start_http_server

    # Importing a controller module registers its kopf handlers.
    from ringmaster.controllers import (  # noqa: F401
        catalog,
        garbage_collection,
        inferenceendpoint,
        kopf_readiness,
        poolprofile,
        reachability,
        reductionserverpool,
        settings,
        trainingjob,
    )
    from ringmaster.controllers.kubeapi import load_config
    from ringmaster.controllers.kueue_workloads import KUEUE_ENV, missing_permission
    from ringmaster.controllers.kueue_workloads import register as register_kueue
    from ringmaster.controllers.trainingjob import BYPASS_LIMIT_ENV, QUEUEING_ENV

    # The controllers start inside kopf: they read their settings from the environment.
    if args.queueing:
        os.environ[QUEUEING_ENV] = args.queueing
    if args.bypass_limit is not None:
        os.environ[BYPASS_LIMIT_ENV] = str(args.bypass_limit)
    if args.catalog_configmap:
        catalog.parse_reference(args.catalog_configmap)  # a typo fails here, not in kopf
        os.environ[catalog.CATALOG_CONFIGMAP_ENV] = args.catalog_configmap

    _progress_settings(args)
    load_config()
    if args.metrics_port:
        start_http_server(args.metrics_port)
    kopf.configure(verbose=args.verbose)
    # Shared with the Kueue integration, which follows Kueue installed while the operator runs.
    insights = Insights()
    kopf_settings = kopf.OperatorSettings()
    # LeaderWorkerSet (docs/install.md): watched only where the operator may watch it.
    if (args.lws or os.environ.get(inferenceendpoint.LWS_ENV) or "auto") != "off":
        refused = inferenceendpoint.missing_lws_permission()
        if refused is None:
            inferenceendpoint.register_leader_worker_set(insights, kopf_settings)
        else:
            logging.getLogger(__name__).warning(
                "LeaderWorkerSet integration off: this identity may not %s (the chart grants it "
                "with lws.enabled=true); endpoints whose replicas span hosts wait",
                refused,
            )
    # Kueue (docs/install.md): its handlers only where its objects may be watched.
    if (args.kueue or os.environ.get(KUEUE_ENV) or "auto") != "off":
        exact = [n for n in args.namespaces if not any(c in n for c in "*?[")]
        missing = missing_permission(exact)
        if missing is None:
            register_kueue(insights=insights, settings=kopf_settings)
        else:
            logging.getLogger(__name__).warning(
                "Kueue integration off: this identity may not %s (the chart grants it with "
                "kueue.enabled=true); labelled TrainingJobs are admitted by Ringmaster",
                missing,
            )
    if not args.verbose:
        # kopf logs every handler call at INFO; the controllers log and post what matters.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    # The kubernetes client's urllib3 warns on each of its quick reconnects; while the API is
    # away the controllers say so once (controllers/outage.py) and pace their own retries, and
    # kopf's retries of its watches are counted, not logged (controllers/reachability.py).
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    garbage_collection.tune()
    # Handlers are never held for good by a watcher that stopped before its first listing.
    kopf_readiness.install()
    priority = None
    if args.peering is not None:
        priority = args.priority if args.priority is not None else random.randint(1, 2**31 - 1)
    kopf.run(
        insights=insights,
        settings=kopf_settings,
        priority=priority,
        clusterwide=not args.namespaces,
        namespaces=args.namespaces,
        standalone=args.peering is None,
        peering_name=args.peering,
        liveness_endpoint=args.liveness,
    )
    return 0


def _progress_settings(args: argparse.Namespace) -> None:
    """The flags become the environment the controllers read at start."""
    from ringmaster.controllers import progress_server, training_observer

    values = {
        progress_server.PORT_ENV: args.progress_port,
        training_observer.PROGRESS_URL_ENV: args.progress_url,
        progress_server.TLS_CERT_ENV: args.progress_tls_cert,
        progress_server.TLS_KEY_ENV: args.progress_tls_key,
        training_observer.PROGRESS_CA_ENV: args.progress_tls_ca,
        progress_server.INSECURE_ENV: "true" if args.progress_insecure_http else None,
        training_observer.CALIBRATION_CONFIGMAP_ENV: args.calibration_configmap,
    }
    for name, value in values.items():
        if value is not None:
            os.environ[name] = str(value)
    progress_server.settings_from_environment()  # a missing certificate fails here, not in kopf
