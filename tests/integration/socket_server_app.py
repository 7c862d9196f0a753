"""A process serving strom's socket servers for every configured listener, with a dispatcher that answers
ApiVersions, Metadata (with the principal's name as the cluster id, so tests can see who they are) and
CreateAcls / DescribeAcls / DeleteAcls through strom's authorizer and ACL handlers.

Connection handling (quotas, idle expiry, accept back-off, TLS, SASL) is the broker's own code; only the request
handlers are replaced. Run: ``python tests/integration/socket_server_app.py --nofile N --override k=v ...``;
prints ``ready on NAME=port,...`` once every listener is bound.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import signal
import sys

from strom.protocol.api_keys import ApiKey
from strom.protocol.connection import KafkaConnection
from strom.protocol.headers import decode_request_header
from strom.protocol.messages import REQUESTS, ApiVersionsResponse, MetadataResponse
from strom.server.broker_config import BrokerConfig
from strom.server.security.acl_handlers import handle_create_acls, handle_delete_acls, handle_describe_acls
from strom.server.security.authorizer import StandardAuthorizer, create_authorizer
from strom.server.security.channel_builders import build_socket_servers
from strom.server.security.credentials import FileCredentialStore, default_credential_store
from strom.server.security.scram_handlers import (
    handle_alter_user_scram_credentials,
    handle_describe_user_scram_credentials,
)
from strom.server.socket_server import ConnectionClosed, ConnectionContext

_SERVER = KafkaConnection("server")
_ACL_HANDLERS = {int(ApiKey.CREATE_ACLS): handle_create_acls, int(ApiKey.DESCRIBE_ACLS): handle_describe_acls,
                 int(ApiKey.DELETE_ACLS): handle_delete_acls}
_SCRAM_HANDLERS = {int(ApiKey.ALTER_USER_SCRAM_CREDENTIALS): handle_alter_user_scram_credentials,
                   int(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS): handle_describe_user_scram_credentials}
AUTHORIZER: StandardAuthorizer | None = None
CREDENTIALS: FileCredentialStore | None = None
ADDRESSES: dict[str, tuple[str, int]] = {}  # listener name → advertised host and bound port


async def dispatch(ctx: ConnectionContext, frame: memoryview) -> bytes | None:
    header, offset = decode_request_header(frame)
    if header.api_key == ApiKey.API_VERSIONS:
        keys = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=0, max_version=v)  # type: ignore[attr-defined]
                for k, v in ((18, 3), (3, 9), (17, 1), (36, 2), (29, 3), (30, 3), (31, 3), (50, 0), (51, 0))]
        return _SERVER.encode_response(header, ApiVersionsResponse(api_keys=keys), min(header.api_version, 3))
    if header.api_key == ApiKey.METADATA:
        host, port = ADDRESSES[ctx.listener_name]
        broker = MetadataResponse.MetadataResponseBroker(node_id=1, host=host, port=port)  # type: ignore[attr-defined]
        return _SERVER.encode_response(header, MetadataResponse(cluster_id=str(ctx.principal), controller_id=1,
                                                                brokers=[broker], topics=[]))
    scram = _SCRAM_HANDLERS.get(header.api_key)
    if scram is not None:
        request = REQUESTS[header.api_key].decode(frame[offset:], header.api_version)
        return _SERVER.encode_response(header, scram(CREDENTIALS, AUTHORIZER, ctx.principal, ctx.client_host,
                                                     request))
    handler = _ACL_HANDLERS.get(header.api_key)
    if handler is not None:
        request = REQUESTS[header.api_key].decode(frame[offset:], header.api_version)
        response = handler(AUTHORIZER, ctx.principal, ctx.client_host, request, header.api_version)
        return _SERVER.encode_response(header, response)
    raise ConnectionClosed()


async def serve(config: BrokerConfig, data_dir: str | None) -> None:
    global AUTHORIZER, CREDENTIALS
    AUTHORIZER = create_authorizer(config, data_dir)
    CREDENTIALS = default_credential_store(config, data_dir)
    servers = build_socket_servers(config, dispatch, data_dir=data_dir, credentials=CREDENTIALS)
    for s in servers:
        await s.start()
        ADDRESSES[s.listener.name] = (s.listener.host or "127.0.0.1", int(s.bound_port or 0))
    print("ready on " + ",".join(f"{s.listener.name}={s.bound_port}" for s in servers), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for s in servers:
        await s.stop()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--override", action="append", default=[])
    p.add_argument("--nofile", type=int, default=0, help="lower RLIMIT_NOFILE to this (accept() EMFILE tests)")
    p.add_argument("--data-dir", default=None)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(levelname)s %(message)s", stream=sys.stderr)
    if args.nofile:
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile, args.nofile))
    props = dict(o.split("=", 1) for o in args.override)
    config = BrokerConfig(props)
    try:
        import uvloop  # type: ignore[import-not-found]

        runner = uvloop.run
    except ImportError:  # pragma: no cover - the test extras install uvloop
        runner = asyncio.run
    runner(serve(config, args.data_dir))


if __name__ == "__main__":
    main()
