// The gRPC-web clients, generated from proto/ (protoc-gen-es into src/gen), over
// @connectrpc/connect-web's gRPC-web transport.
import { createClient } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-web";
import { grpcWebUrl } from "./config";
import { Events, Orders, SeatMaps } from "./gen/onsale/v1/read_pb";
import { currentSession } from "./session";

const transport = createGrpcWebTransport({
  baseUrl: grpcWebUrl(),
  interceptors: [
    (next) => async (req) => {
      const s = currentSession();
      if (s) req.header.set("authorization", `Bearer ${s.token}`);
      return next(req);
    },
  ],
});

export const seatMaps = createClient(SeatMaps, transport);
export const events = createClient(Events, transport);
export const orders = createClient(Orders, transport);
