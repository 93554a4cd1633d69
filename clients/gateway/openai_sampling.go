package main

// The OpenAI bodies' sampling fields onto steady.v1's, which have presence (docs/api.md,
// "Sampling"): a field the body sets is sent as it is, 0 included; a field it leaves out is left out
// of the GenerateRequest, so that steady-server applies the checkpoint's generation_config.json
// default (ModelInfo.generation_defaults_json), except where OpenAI defines a default of its own and
// the checkpoint sets none: temperature 1, and max_tokens (defaultCompletionTokens, defaultChatTokens).

import (
	"encoding/json"

	steadyv1 "steady/v1"
)

// checkpointDefaults: which fields ModelInfo.generation_defaults_json sets (the values are the server's
// business). A missing or unreadable object sets none: the gateway's own defaults apply.
func checkpointDefaults(info *steadyv1.ModelInfo) map[string]json.RawMessage {
	var d map[string]json.RawMessage
	if json.Unmarshal([]byte(info.GetGenerationDefaultsJson()), &d) != nil {
		return nil
	}
	return d
}

func setSampling(req *request, chat bool, info *steadyv1.ModelInfo, g *steadyv1.GenerateRequest) {
	defaults := checkpointDefaults(info)
	_, hasMaxTokens := defaults["max_tokens"]
	_, hasTemperature := defaults["temperature"]
	switch {
	case req.MaxCompletionTokens != nil:
		g.MaxTokensSet = &steadyv1.GenerateRequest_MaxTokens{MaxTokens: *req.MaxCompletionTokens}
	case req.MaxTokens != nil:
		g.MaxTokensSet = &steadyv1.GenerateRequest_MaxTokens{MaxTokens: *req.MaxTokens}
	case !hasMaxTokens:
		maxTokens := int64(defaultCompletionTokens)
		if chat {
			maxTokens = defaultChatTokens
		}
		if limit := info.GetLimits().GetMaxNewTokens(); limit > 0 && maxTokens > limit {
			maxTokens = limit // a default never exceeds the server's --max-new-tokens
		}
		g.MaxTokensSet = &steadyv1.GenerateRequest_MaxTokens{MaxTokens: maxTokens}
	}
	switch {
	case req.Temperature != nil:
		g.TemperatureSet = &steadyv1.GenerateRequest_Temperature{Temperature: float32(*req.Temperature)}
	case !hasTemperature:
		g.TemperatureSet = &steadyv1.GenerateRequest_Temperature{Temperature: 1}
	}
	if req.TopP != nil {
		g.TopPSet = &steadyv1.GenerateRequest_TopP{TopP: float32(*req.TopP)}
	}
	if req.TopK != nil {
		g.TopKSet = &steadyv1.GenerateRequest_TopK{TopK: *req.TopK}
	}
	if req.RepetitionPenalty != nil {
		g.RepetitionPenaltySet = &steadyv1.GenerateRequest_RepetitionPenalty{RepetitionPenalty: float32(*req.RepetitionPenalty)}
	}
}
