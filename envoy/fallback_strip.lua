-- condisagg body guard (Envoy Lua filter, placed after ext_proc).
--
-- Only pd-sidecar may set the engine-control members kv_transfer_params, ec_transfer_params
-- and vllm_xargs (they tell the engine where to pull KV from; vLLM copies vllm_xargs into the
-- same extra_args). condisagg cuts them from every body it sees; this guard cuts them again
-- from every request body, whether condisagg decided the request or Envoy skipped it
-- (failure_mode_allow), so a client's member never reaches a worker even on a path or in a
-- mode condisagg passed through. A body that is not one JSON object is refused with vLLM's
-- 400: the engine would refuse it too, and a body this scanner cannot read must not pass
-- unstripped. A body that cannot spell any of the keys passes unread. A leading UTF-8 BOM is
-- kept (the engine's json.loads skips it).

local KEYS = { kv_transfer_params = true, ec_transfer_params = true, vllm_xargs = true }
local BOM = "\239\187\191"
local ESCAPES = { ['"'] = '"', ['\\'] = '\\', ['/'] = '/', b = '\b', f = '\f', n = '\n', r = '\r', t = '\t' }

local function skip_ws(s, i)
  return s:find("[^ \t\r\n]", i) or #s + 1
end

-- read_string reads the JSON string opening at i; it returns the index after its closing quote
-- and its decoded text (non-ASCII escapes become a byte no key name contains), or nil.
local function read_string(s, i)
  local parts, j = {}, i + 1
  while true do
    local k = s:find('["\\]', j)
    if not k then return nil end
    parts[#parts + 1] = s:sub(j, k - 1)
    if s:byte(k) == 34 then return k + 1, table.concat(parts) end
    local e = s:sub(k + 1, k + 1)
    if e == "u" then
      local hex = s:sub(k + 2, k + 5)
      if not hex:match("^%x%x%x%x$") then return nil end
      local cp = tonumber(hex, 16)
      parts[#parts + 1] = cp < 128 and string.char(cp) or "\255"
      j = k + 6
    elseif ESCAPES[e] then
      parts[#parts + 1] = ESCAPES[e]
      j = k + 2
    else
      return nil
    end
  end
end

-- skip_string returns the index after the JSON string opening at i, or nil, without decoding
-- it: values are only skipped, and building their text would cost the guard ~80 ms per MiB.
local function skip_string(s, i)
  local j = i + 1
  while true do
    local k = s:find('["\\]', j)
    if not k then return nil end
    if s:byte(k) == 34 then return k + 1 end
    local e = s:sub(k + 1, k + 1)
    if not (ESCAPES[e] or e == "u") then return nil end
    j = k + 2
  end
end

-- skip_value returns the index after the JSON value starting at i, or nil.
local function skip_value(s, i)
  local c = s:byte(i)
  if c == 34 then return skip_string(s, i) end
  if c == 123 or c == 91 then
    local depth, j = 0, i
    while true do
      j = s:find('["{}%[%]]', j)
      if not j then return nil end
      local b = s:byte(j)
      if b == 34 then
        j = skip_string(s, j)
        if not j then return nil end
      else
        depth = (b == 123 or b == 91) and depth + 1 or depth - 1
        j = j + 1
        if depth == 0 then return j end
      end
    end
  end
  local e = s:find('[,}%] \t\r\n]', i) or #s + 1
  if e == i then return nil end
  return e
end

-- strip returns the body without its top-level KEYS members and how many it cut, or nil when
-- the body is not one JSON object.
local function strip(s)
  local first = 1
  if s:sub(1, 3) == BOM then first = 4 end
  local i = skip_ws(s, first)
  if s:byte(i) ~= 123 then return nil end
  local kept, cut = {}, 0
  i = skip_ws(s, i + 1)
  if s:byte(i) ~= 125 then
    while true do
      if s:byte(i) ~= 34 then return nil end
      local start = i
      local j, key = read_string(s, i)
      if not j then return nil end
      j = skip_ws(s, j)
      if s:byte(j) ~= 58 then return nil end
      j = skip_value(s, skip_ws(s, j + 1))
      if not j then return nil end
      if KEYS[key] then cut = cut + 1 else kept[#kept + 1] = s:sub(start, j - 1) end
      i = skip_ws(s, j)
      local b = s:byte(i)
      if b == 125 then break end
      if b ~= 44 then return nil end
      i = skip_ws(s, i + 1)
    end
  end
  if skip_ws(s, i + 1) <= #s then return nil end
  if cut == 0 then return s, 0 end
  return s:sub(1, first - 1) .. "{" .. table.concat(kept, ",") .. "}", cut
end

function envoy_on_request(handle)
  local headers = handle:headers()
  local body = handle:body()
  if body == nil or body:length() == 0 then return end
  local s = body:getBytes(0, body:length())
  -- A body that cannot spell a key to cut passes unread: none of the names, no \u escape (the
  -- only other way to spell a key's letters) and no NUL byte (UTF-16 and UTF-32, which the
  -- engine decodes, spell ASCII with NULs). A few memchr passes instead of a parse.
  local maybe = s:find("\0", 1, true) or s:find("\\u", 1, true)
  for key in pairs(KEYS) do maybe = maybe or s:find(key, 1, true) end
  if not maybe then return end
  local out, cut = strip(s)
  if out == nil then
    handle:respond({ [":status"] = "400", ["content-type"] = "application/json", ["x-condisagg-error"] = "unreadable_body" },
      '{"error":{"message":"request body is not one JSON object",' ..
      '"type":"BadRequestError","param":null,"code":400}}')
    return
  end
  if cut > 0 then
    local n = body:setBytes(out)
    if headers:get("content-length") ~= nil then headers:replace("content-length", tostring(n)) end
  end
end
