-- get.lua: read job records, decoded (a record is packed, see record.lua). Reads only.
--
-- KEYS[1], KEYS[2], ...: job records (<prefix>:job:<id>)
-- ARGV[1], ARGV[2], ...: the fields wanted, by their names in record.lua (none: every field the record
-- has but `h`, the job's attempts as packed bytes, which is returned only when asked for)
-- Returns: per key, a flat array of field, value pairs (like HGETALL; every value a string, `s` the
-- state's name, `bo` its delays and `ch` its children's suffixes comma-separated), empty when there is
-- no record.

local wanted = ARGV
if #wanted == 0 then wanted = {'s', 't', 'b', 'r', 'ttr', 'm', 'c', 'a', 'd', 'rc', 'e', 'x', 'bo', 'p', 'f', 'tc', 'ch'} end
local out = {}
for k, key in ipairs(KEYS) do
  local pairs_out = {}
  local r = rec_load(key)
  if r then
    for _, f in ipairs(wanted) do
      local x = r[f]
      if type(x) == 'number' then
        pairs_out[#pairs_out + 1] = f
        pairs_out[#pairs_out + 1] = string.format('%d', x)
      elseif f == 'ch' and x then
        -- The children's suffixes, comma-separated.
        pairs_out[#pairs_out + 1] = f
        pairs_out[#pairs_out + 1] = table.concat(x, ',')
      elseif type(x) == 'table' then
        -- A list of numbers (bo), comma-separated.
        local parts = {}
        for i, n in ipairs(x) do parts[i] = string.format('%d', n) end
        pairs_out[#pairs_out + 1] = f
        pairs_out[#pairs_out + 1] = table.concat(parts, ',')
      elseif x ~= nil then
        pairs_out[#pairs_out + 1] = f
        pairs_out[#pairs_out + 1] = x
      end
    end
  end
  out[k] = pairs_out
end
return out
