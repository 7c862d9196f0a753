"""The web console (Flask): overview, brokers, topics, topic detail with a message browser, consumer groups with
lag, rate charts, and — only with ``allow_writes`` — create/delete topic and reset offsets forms.

Pages render server-side from :class:`~strom.ui.cluster_view.ClusterView`; charts (Chart.js, vendored under
``static/vendor``) read ``/api/history`` and refresh themselves. ``/metrics`` serves the console's registry in
Prometheus form with kafka_exporter's consumer-lag series (``kafka_consumergroup_lag{consumergroup,topic,
partition}``). A missing topic or group is a 404 page, a bad form value a 400 page, a cluster that does not
answer a 503 page: never a traceback.

Threading: Flask's threaded server; every handler goes through the thread-safe ``ClusterView``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from flask import Flask, Response, abort, jsonify, redirect, render_template, request, url_for
from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry
from werkzeug.exceptions import HTTPException

from strom import __version__
from strom.common.errors import BrokerResponseError, KafkaError
from strom.metrics.prometheus import KafkaMetricsCollector
from strom.ui.cluster_view import ClusterView, NotFound

__all__ = ["create_app", "LagCollector"]

log = logging.getLogger(__name__)


class LagCollector(Collector):
    """kafka_exporter's consumer-group series from the console's last sample."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view

    def collect(self) -> Iterator[GaugeMetricFamily]:
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "Current approximate lag of a consumer group at "
                                "topic/partition", labels=["consumergroup", "topic", "partition"])
        for (group, topic, partition), value in sorted(self.view.consumer_lag().items()):
            lag.add_metric([group, topic, str(partition)], value)
        yield lag


def create_app(view: ClusterView, *, allow_writes: bool = False) -> Flask:
    """The console's Flask application over ``view``."""
    app = Flask(__name__)
    app.config["ALLOW_WRITES"] = allow_writes
    registry = CollectorRegistry(auto_describe=False)
    registry.register(KafkaMetricsCollector(view.metrics, "strom.ui"))
    registry.register(LagCollector(view))

    @app.context_processor
    def globals_() -> dict[str, Any]:
        return {"allow_writes": allow_writes, "version": __version__}

    def require_writes() -> None:
        if not allow_writes:
            abort(403, "The console is read-only: start it with --allow-writes to change the cluster.")

    # ------------------------------------------------------------------------------------- pages

    @app.get("/")
    def overview() -> str:
        cluster_id, controller, brokers = view.cluster()
        topics = view.topics()
        groups = view.groups()
        partitions = sum(len(t.partitions) for t in topics)
        under = sum(t.under_replicated for t in topics)
        offline = sum(t.offline for t in topics)
        return render_template("overview.html", cluster_id=cluster_id, controller=controller, brokers=brokers,
                               topics=topics, groups=groups, partitions=partitions, under_replicated=under,
                               offline=offline, healthy=offline == 0 and under == 0 and bool(brokers))

    @app.get("/brokers")
    def brokers() -> str:
        cluster_id, controller, nodes = view.cluster()
        leaders: dict[int, int] = {}
        replicas: dict[int, int] = {}
        for t in view.topics():
            for p in t.partitions:
                if p.leader is not None:
                    leaders[p.leader] = leaders.get(p.leader, 0) + 1
                for r in p.replicas:
                    replicas[r] = replicas.get(r, 0) + 1
        return render_template("brokers.html", cluster_id=cluster_id, controller=controller, brokers=nodes,
                               leaders=leaders, replicas=replicas)

    @app.get("/topics")
    def topics() -> str:
        query = request.args.get("q", "").strip()
        internal = request.args.get("internal") == "1"
        rows = [t for t in view.topics() if (internal or not t.internal) and query.lower() in t.name.lower()]
        return render_template("topics.html", topics=rows, query=query, internal=internal)

    @app.get("/topics/<name>")
    def topic(name: str) -> str:
        return render_template("topic.html", topic=view.topic(name))

    @app.get("/topics/<name>/messages")
    def messages(name: str) -> str:
        row = view.topic(name)
        partition = _int_arg("partition", 0, 0, 1 << 31)
        limit = _int_arg("limit", 20, 1, 500)
        records = view.newest_messages(name, partition, limit)
        return render_template("messages.html", topic=row, partition=partition, limit=limit,
                               messages=list(reversed(records)))

    @app.get("/groups")
    def groups() -> str:
        return render_template("groups.html", groups=view.groups())

    @app.get("/groups/<group_id>")
    def group(group_id: str) -> str:
        return render_template("group.html", group=view.group(group_id))

    # ------------------------------------------------------------------------------------ writes

    @app.post("/topics")
    def create_topic() -> Any:
        require_writes()
        name = request.form.get("name", "").strip()
        if not name:
            abort(400, "A topic name is required.")
        partitions = _int_form("partitions", 1, 1, 100_000)
        replication = _int_form("replication_factor", 1, 1, 32)
        view.create_topic(name, partitions, replication)
        return redirect(url_for("topic", name=name), code=303)

    @app.post("/topics/<name>/delete")
    def delete_topic(name: str) -> Any:
        require_writes()
        view.topic(name)
        if request.form.get("confirm") != name:
            abort(400, f"Type the topic name ({name}) to confirm the deletion.")
        view.delete_topic(name)
        return redirect(url_for("topics"), code=303)

    @app.post("/groups/<group_id>/reset")
    def reset_offsets(group_id: str) -> Any:
        require_writes()
        view.group(group_id)
        if request.form.get("confirm") != group_id:
            abort(400, f"Type the group id ({group_id}) to confirm the reset.")
        to = request.form.get("to", "")
        offset = _int_form("offset", -1, -1, 1 << 62) if to == "offset" else None
        try:
            view.reset_offsets(group_id, to, offset)
        except ValueError as e:
            abort(400, str(e))
        return redirect(url_for("group", group_id=group_id), code=303)

    # -------------------------------------------------------------------------------------- data

    @app.get("/api/history")
    def history() -> Response:
        key = request.args.get("key", "")
        if not key:
            abort(400, "key is required")
        return jsonify({"key": key, "points": view.history(key)})

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry), mimetype="text/plain; version=0.0.4; charset=utf-8")

    # ------------------------------------------------------------------------------------ errors

    @app.errorhandler(NotFound)
    def not_found(e: NotFound) -> tuple[str, int]:
        return render_template("error.html", status=404, title="Not found", message=str(e)), 404

    @app.errorhandler(HTTPException)
    def http_error(e: HTTPException) -> tuple[str, int]:
        status = e.code or 500
        return render_template("error.html", status=status, title=e.name, message=e.description), status

    @app.errorhandler(KafkaError)
    def kafka_error(e: KafkaError) -> tuple[str, int]:
        if isinstance(e, BrokerResponseError):  # the cluster answered with an error code
            return render_template("error.html", status=400, title="The cluster refused the request",
                                   message=f"{type(e).__name__}: {e}"), 400
        log.warning("strom ui: cluster request failed: %s", e)
        return render_template("error.html", status=503, title="The cluster did not answer",
                               message=f"{type(e).__name__}: {e}"), 503

    @app.errorhandler(Exception)
    def unexpected(e: Exception) -> tuple[str, int]:
        log.error("strom ui: unexpected error", exc_info=True)
        return render_template("error.html", status=500, title="Error",
                               message=f"{type(e).__name__}: {e}"), 500

    return app


def _int_arg(name: str, default: int, low: int, high: int) -> int:
    return _bounded(name, request.args.get(name), default, low, high)


def _int_form(name: str, default: int, low: int, high: int) -> int:
    return _bounded(name, request.form.get(name), default, low, high)


def _bounded(name: str, raw: str | None, default: int, low: int, high: int) -> int:
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        abort(400, f"{name} must be a whole number, not {raw!r}.")
    if not low <= value <= high:
        abort(400, f"{name} must be between {low} and {high}, not {value}.")
    return value
