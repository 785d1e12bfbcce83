-- Argo CD health check of a KuraInstance (Argo CD's resource_customizations
-- format), read from the operator's status alone: Progressing until it has
-- observed the current generation; Degraded when Stalled (the operator gave
-- up until the inputs change or its stall window ends); Suspended while the
-- operator reports it paused (status.phase Paused: spec.paused with a
-- pause.until that has passed pauses nothing); Healthy when Ready;
-- Progressing otherwise, with the reason.
local hs = {}

local function condition(status, type)
  if status == nil or status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == type then
      return c
    end
  end
  return nil
end

local status = obj.status
if status == nil or status.conditions == nil or #status.conditions == 0 then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator's first status"
  return hs
end

local generation = obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. generation
  return hs
end

local stalled = condition(status, "Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = stalled.message
  return hs
end

local reconciling = condition(status, "Reconciling")
if status.phase == "Paused" then
  hs.status = "Suspended"
  -- who paused, why, until when (the operator's message)
  if reconciling ~= nil and reconciling.message ~= nil and reconciling.message ~= "" then
    hs.message = reconciling.message
  else
    hs.message = "Paused: the operator applies and deletes nothing"
  end
  return hs
end

local ready = condition(status, "Ready")
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message
  return hs
end

hs.status = "Progressing"
if ready ~= nil and ready.message ~= nil and ready.message ~= "" then
  hs.message = ready.message
elseif reconciling ~= nil and reconciling.message ~= nil then
  hs.message = reconciling.message
else
  hs.message = "Waiting for the instance to be Ready"
end
return hs
