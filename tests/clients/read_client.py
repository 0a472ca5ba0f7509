"""A non-Rust client of onsale's read side, generated from proto/ at run time.

Calls the gRPC services with grpcio and the same services over gRPC-web (plain HTTP/1.1
POSTs with the gRPC-web framing, as a browser does), and prints what it saw as one JSON line.

usage: read_client.py PROTO_DIR GRPC_HOST:PORT EVENT_ID ORDER_ID BEARER_TOKEN
"""
import json
import struct
import sys
import tempfile
import urllib.request

from grpc_tools import protoc


def generate(proto_dir):
    out = tempfile.mkdtemp()
    rc = protoc.main(["protoc", f"-I{proto_dir}", f"--python_out={out}", f"--grpc_python_out={out}",
                      "onsale/v1/read.proto"])
    if rc != 0:
        raise SystemExit(f"protoc failed: {rc}")
    sys.path.insert(0, out)


def grpc_web(addr, method, request, response_type):
    body = request.SerializeToString()
    req = urllib.request.Request(
        f"http://{addr}/onsale.v1.{method}",
        data=b"\x00" + struct.pack(">I", len(body)) + body,
        headers={"content-type": "application/grpc-web+proto", "x-grpc-web": "1", "accept": "application/grpc-web+proto"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as res:
        raw = res.read()
    message, trailers = None, {}
    while raw:
        flag, length = raw[0], struct.unpack(">I", raw[1:5])[0]
        chunk, raw = raw[5:5 + length], raw[5 + length:]
        if flag & 0x80:
            for line in chunk.decode().split("\r\n"):
                if ":" in line:
                    k, v = line.split(":", 1)
                    trailers[k.strip().lower()] = v.strip()
        else:
            message = response_type.FromString(chunk)
    return message, trailers


def main():
    proto_dir, addr, event_id, order_id, token = sys.argv[1:6]
    generate(proto_dir)
    import grpc
    from onsale.v1 import read_pb2 as pb, read_pb2_grpc as rpc

    out = {}
    with grpc.insecure_channel(addr) as ch:
        seat_maps, orders = rpc.SeatMapsStub(ch), rpc.OrdersStub(ch)
        m = seat_maps.GetSeatMap(pb.GetSeatMapRequest(event_id=event_id, section="S1"), timeout=10)
        out["grpc_map"] = {"seq": m.seq, "lsn": m.lsn, "sections": len(m.sections),
                           "sold_s1": m.sections[0].sold, "seats": len(m.seats)}
        o = orders.GetOrder(pb.GetOrderRequest(order_id=order_id), metadata=[("authorization", f"Bearer {token}")], timeout=10)
        out["grpc_order"] = {"status": o.status, "seats": list(o.seat_ids)}
        try:
            orders.GetOrder(pb.GetOrderRequest(order_id=order_id), timeout=10)
        except grpc.RpcError as e:
            out["grpc_unauthenticated"] = e.code().name
        try:
            seat_maps.GetSeatMap(pb.GetSeatMapRequest(event_id="not-an-id"), timeout=10)
        except grpc.RpcError as e:
            out["grpc_bad_id"] = e.code().name
    m, trailers = grpc_web(addr, "SeatMaps/GetSeatMap", pb.GetSeatMapRequest(event_id=event_id), pb.SeatMap)
    out["web_map"] = {"seq": m.seq, "sections": len(m.sections), "status": trailers.get("grpc-status")}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
