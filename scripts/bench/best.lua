-- wrk: best-available one-seat holds ({"quantity":1}) as many fans (BENCH_TOKENS), on BENCH_EVENT.
local event = os.getenv("BENCH_EVENT")
local tokens = {}
for line in io.lines(os.getenv("BENCH_TOKENS")) do tokens[#tokens + 1] = line end
local n = 0
function request()
  n = n + 1
  return wrk.format("POST", "/v1/events/" .. event .. "/holds",
    {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. tokens[(n % #tokens) + 1]},
    '{"quantity":1}')
end
function done(summary, latency, requests)
  io.write(string.format('{"rps":%.0f,"non2xx":%d,"p99_ms":%.2f}\n', summary.requests / (summary.duration / 1e6), summary.errors.status, latency:percentile(99) / 1000))
end
