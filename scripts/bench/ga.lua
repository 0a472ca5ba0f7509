-- wrk: general-admission holds ({"quantity":BENCH_SEATS,"section":"FLOOR"}) as many fans
-- (BENCH_TOKENS), on BENCH_EVENT.
local event = os.getenv("BENCH_EVENT")
local body = string.format('{"quantity":%d,"section":"FLOOR"}', tonumber(os.getenv("BENCH_SEATS") or "1"))
local tokens = {}
for line in io.lines(os.getenv("BENCH_TOKENS")) do tokens[#tokens + 1] = line end
local n = 0
local won = 0
function request()
  n = n + 1
  return wrk.format("POST", "/v1/events/" .. event .. "/holds",
    {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. tokens[(n % #tokens) + 1]},
    body)
end
function done(summary, latency, requests)
  local s = summary.duration / 1e6
  local ok = summary.requests - summary.errors.status
  io.write(string.format('{"attempts_per_s":%.1f,"holds_per_s":%.1f,"p50_ms":%.2f,"p99_ms":%.2f,"errors":%d}\n',
    summary.requests / s, ok / s, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
