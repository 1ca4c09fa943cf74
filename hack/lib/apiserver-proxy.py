#!/usr/bin/python3
"""TCP forwarder: LISTEN_IP:LISTEN_PORT -> TARGET_IP:TARGET_PORT.

The local cluster binds kube-apiserver to 127.0.0.1 and has no kube-proxy, so the `kubernetes`
Service IP (10.96.0.1:443) that every in-cluster client dials would lead nowhere. local-cluster.sh
puts 10.96.0.1 on the pod bridge (a local address, so pods reach it through their default route
without the host forwarding anything) and runs this forwarder there. TLS passes through untouched:
the apiserver certificate carries 10.96.0.1 and kubernetes.default.svc, so in-cluster clients
verify it with their service-account CA as usual.

Usage: apiserver-proxy.py LISTEN_IP LISTEN_PORT TARGET_IP TARGET_PORT
"""

import asyncio
import sys

BUFFER = 64 * 1024


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(BUFFER)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def serve(listen_ip, listen_port, target_ip, target_port):
    async def handle(client_reader, client_writer):
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(target_ip, target_port)
        except OSError as e:
            print(f"apiserver-proxy: cannot reach {target_ip}:{target_port}: {e}", file=sys.stderr, flush=True)
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, upstream_writer), pipe(upstream_reader, client_writer))

    server = await asyncio.start_server(handle, listen_ip, listen_port, reuse_address=True)
    print(f"apiserver-proxy: {listen_ip}:{listen_port} -> {target_ip}:{target_port}", file=sys.stderr, flush=True)
    async with server:
        await server.serve_forever()


def main(argv):
    if len(argv) != 5:
        sys.exit(__doc__.strip().splitlines()[-1])
    listen_ip, listen_port, target_ip, target_port = argv[1], argv[2], argv[3], argv[4]
    for name, port in (("LISTEN_PORT", listen_port), ("TARGET_PORT", target_port)):
        if not port.isdigit() or not 0 < int(port) < 65536:
            sys.exit(f"apiserver-proxy: {name}: want a port number, got {port!r}")
    asyncio.run(serve(listen_ip, int(listen_port), target_ip, int(target_port)))


if __name__ == "__main__":
    main(sys.argv)
