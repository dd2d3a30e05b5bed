// k2conform-llama-cpp: llama.cpp's real `common_chat_parse` behind the k2conform adapter protocol
// (docs/adapter-protocol.md), driven the way llama.cpp's OpenAI server drives it
// (tools/server: `oaicompat_chat_params_parse`, `task_result_state::update_chat_msg`).
//
//   k2conform-llama-cpp --chat-template Kimi-K2-Thinking.jinja
//
// Per request: the chat template picks the parser (`common_chat_templates_apply`, as for a
// request with the case's tools, tool_choice and thinking); `whole` parses the output once,
// final; `stream` re-parses the accumulated text as partial after every delta, then once more
// as final, and sends the message diffs the server turns into SSE chunks.

#include "chat.h"

#include <unistd.h>

#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

const char * const PROTOCOL = "k2conform-adapter/1";
// What the server answers for a call whose id the parser left empty: 32 random characters
// (`gen_tool_call_id`); a fixed stand-in keeps results reproducible.
const char * const RANDOM_ID = "<random-32>";
// The conversation the request renders; the parser depends only on tools and settings.
const char * const USER_TURN = "k2conform: reply as scripted.";

// The server's per-request set-up: it decides which parser runs, and with which flags.
common_chat_parser_params parser_for(const common_chat_templates * templates,
                                     const common_json & request) {
    common_chat_templates_inputs inputs;
    common_chat_msg user;
    user.role    = "user";
    user.content = USER_TURN;
    inputs.messages = {user};
    const common_json tools = request.value("tools", common_json());
    inputs.tools =
        common_chat_tools_parse_oaicompat(tools.is_null() ? common_json::array() : tools);
    // The server reads tool_choice as a string; other JSON (a named function) falls back to "auto".
    const common_json choice = request.value("tool_choice", common_json());
    inputs.tool_choice = common_chat_tool_choice_parse_oaicompat(
        choice.is_string() ? choice.get<std::string>() : "auto");
    auto caps = common_chat_templates_get_caps(templates);
    inputs.parallel_tool_calls = caps["supports_parallel_tool_calls"];
    inputs.reasoning_format    = COMMON_REASONING_FORMAT_DEEPSEEK;  // the server's default
    inputs.enable_thinking     = request.value("thinking", false);

    const common_chat_params chat_params = common_chat_templates_apply(templates, inputs);
    common_chat_parser_params params(chat_params);
    params.reasoning_format     = inputs.reasoning_format;
    params.reasoning_in_content = false;  // only for --reasoning-format deepseek-legacy
    if (!chat_params.parser.empty()) {
        params.parser.load(chat_params.parser);
    }
    return params;
}

common_json nullable(const std::string & text) {
    return text.empty() ? common_json() : common_json(text);
}

// One server-side message state: the accumulated text, the message and the ids handed out.
struct message_state {
    const common_chat_parser_params & params;
    std::string text;
    common_chat_msg message;
    std::vector<std::string> ids;
    int random_ids = 0;

    explicit message_state(const common_chat_parser_params & params) : params(params) {}

    // `update_chat_msg`: parse all the text so far; an empty parse leaves the message as it was.
    std::vector<common_chat_msg_diff> update(const std::string & added, bool is_partial) {
        text += added;
        common_chat_msg parsed = common_chat_parse(text, is_partial, params);
        if (parsed.empty()) {
            return {};
        }
        parsed.set_tool_call_ids(ids, [this] { ++random_ids; return std::string(RANDOM_ID); });
        auto diffs = common_chat_msg_diff::compute_diffs(message, parsed);
        message = std::move(parsed);
        return diffs;
    }
};

common_json whole_result(const message_state & state) {
    common_json calls = common_json::array();
    for (const auto & call : state.message.tool_calls) {
        calls.push_back(
            {{"id", nullable(call.id)}, {"name", call.name}, {"arguments", call.arguments}});
    }
    common_json meta = common_json::object();
    meta["adapter"] = "llama-cpp";
    meta["version"] = LLAMA_CPP_SDIST_VERSION;
    if (state.random_ids > 0) {
        meta["masked_random_ids"] = state.random_ids;
    }
    return common_json::object({
        {"content", nullable(state.message.content)},
        {"reasoning", nullable(state.message.reasoning_content)},
        {"tool_calls", calls}, {"outcome", "ok"}, {"error", nullptr}, {"meta", meta},
    });
}

// `server_chat_msg_diff_to_json_oaicompat`, in the protocol's event shape.
common_json diff_event(const common_chat_msg_diff & diff) {
    common_json event = common_json::object();
    if (!diff.reasoning_content_delta.empty()) {
        event["reasoning"] = diff.reasoning_content_delta;
    }
    if (!diff.content_delta.empty()) {
        event["content"] = diff.content_delta;
    }
    if (diff.tool_call_index != std::string::npos) {
        common_json call = common_json::object();
        call["index"] = diff.tool_call_index;
        if (!diff.tool_call_delta.id.empty()) {
            call["id"] = diff.tool_call_delta.id;
        }
        if (!diff.tool_call_delta.name.empty()) {
            call["name"] = diff.tool_call_delta.name;
        }
        if (!diff.tool_call_delta.arguments.empty()) {
            call["arguments"] = diff.tool_call_delta.arguments;
        }
        event["tool_calls"] = common_json::array({call});
    }
    return event;
}

// A request the harness cannot read: its own failure, never a finding about the parser.
common_json glue_error(const std::string & why) {
    return common_json::object({{"outcome", "adapter-error"}, {"error", why}});
}

common_json crash(const std::string & where, const std::exception & error) {
    return common_json::object({{"outcome", "crash"}, {"error", where + ": " + error.what()}});
}

common_json answer(const common_chat_templates * templates, const common_json & line) {
    const std::string mode = line.at("mode").get<std::string>();
    const common_json & deltas = line.at("deltas");
    common_chat_parser_params params;
    try {
        params = parser_for(templates, line.at("request"));
    } catch (const std::exception & error) {
        return crash("common_chat_templates_apply (the request is refused)", error);
    }
    message_state state(params);
    if (mode == "whole") {
        try {
            state.update(deltas.at(0).at("text").get<std::string>(), false);
        } catch (const std::exception & error) {
            return crash("common_chat_parse", error);
        }
        return whole_result(state);
    }
    if (mode != "stream") {
        return glue_error("unknown mode " + mode);
    }
    common_json events = common_json::array();
    size_t index = 0;
    try {
        for (; index <= deltas.size(); ++index) {
            const bool final_parse = index == deltas.size();
            const std::string added =
                final_parse ? "" : deltas.at(index).at("text").get<std::string>();
            for (const auto & diff : state.update(added, !final_parse)) {
                events.push_back(diff_event(diff));
            }
        }
    } catch (const std::exception & error) {
        const std::string where = index == deltas.size()
            ? "final parse" : "partial parse after delta " + std::to_string(index);
        return crash("common_chat_parse (" + where + ")", error);
    }
    return common_json::object({{"events", events}});
}

std::string read_file(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        throw std::runtime_error("cannot read it");
    }
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

common_json hello(const std::string & template_path) {
    return common_json::object({
        {"protocol", PROTOCOL}, {"name", "llama-cpp"}, {"version", LLAMA_CPP_SDIST_VERSION},
        {"supported_versions", common_json::array({LLAMA_CPP_SDIST_VERSION})},
        {"status", "ok"}, {"reason", ""},
        {"description", "llama.cpp common_chat_parse (Kimi K2 PEG parser) as its server streams "
                        "it; template " + template_path},
    });
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc != 3 || std::string(argv[1]) != "--chat-template") {
        std::fprintf(stderr, "usage: %s --chat-template FILE.jinja\n", argv[0]);
        return 2;
    }
    // Protocol lines keep the real stdout; llama.cpp's log (INFO goes to stdout) goes to stderr.
    FILE * protocol = fdopen(dup(STDOUT_FILENO), "w");
    dup2(STDERR_FILENO, STDOUT_FILENO);
    common_chat_templates_ptr templates;
    try {
        templates = common_chat_templates_init(nullptr, read_file(argv[2]));
    } catch (const std::exception & error) {
        std::fprintf(stderr, "k2conform-llama-cpp: %s: %s\n", argv[2], error.what());
        return 2;
    }
    auto send = [protocol](const common_json & message) {
        std::fprintf(protocol, "%s\n", message.dump().c_str());
        std::fflush(protocol);
    };
    send(hello(argv[2]));
    std::string line;
    while (std::getline(std::cin, line)) {
        common_json request;
        try {
            request = common_json::parse(line);
        } catch (const std::exception & error) {
            send(glue_error(std::string("unreadable request: ") + error.what()));
            continue;
        }
        try {
            send(answer(templates.get(), request));
        } catch (const std::exception & error) {
            send(glue_error(std::string("bad request: ") + error.what()));
        }
    }
    return 0;
}
