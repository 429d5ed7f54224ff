"""What `/openapi.json` says about `POST /v1/videos`: both request forms and the answer.

The route reads its body itself (admission charges the bytes as they arrive, before FastAPI
could parse them), so FastAPI cannot infer the body. It is described here from the models
themselves: `application/json` is a `VideoRequest`; `multipart/form-data` carries the same JSON
as the text field `request` and the uploaded files as `reference` (repeatable). docs/service.md
shows a curl command for each; `tests/serve/test_openapi.py` checks both against this.
"""

from __future__ import annotations

from typing import Any

from prenoise.serve.schema import VideoRequest

__all__ = ["CREATE_VIDEO_OPENAPI", "components"]

_REF = "#/components/schemas/{model}"

_JSON_EXAMPLE = {"prompt": "a red kite over a grey sea", "seed": 7, "duration": 1.0}

CREATE_VIDEO_OPENAPI: dict[str, Any] = {
    "requestBody": {
        "required": False,
        "description": "Per-request overrides of the service recipe; every field is optional "
        "and an empty body runs the recipe as it is. References are paths under --media-root "
        "(JSON `references`) or files uploaded in the multipart form; together they replace "
        "the recipe's references.",
        "content": {
            "application/json": {
                "schema": {"$ref": _REF.format(model="VideoRequest")},
                "example": _JSON_EXAMPLE,
            },
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "request": {
                            "type": "string",
                            "description": "the JSON of a VideoRequest (an application/json "
                            "part or a plain text field)",
                            "example": '{"prompt": "the scene of this photo", "seed": 7}',
                        },
                        "reference": {
                            "type": "array",
                            "items": {"type": "string", "format": "binary"},
                            "description": "reference files (image, video or audio, typed by "
                            "suffix), repeatable; saved for this job only",
                        },
                    },
                    "additionalProperties": False,
                },
                "encoding": {"request": {"contentType": "application/json, text/plain"}},
            },
        },
    },
    "responses": {
        "202": {
            "description": "queued; poll `status_url`",
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string"},
                            "state": {"type": "string", "example": "queued"},
                            "status_url": {"type": "string", "example": "/v1/videos/ID"},
                        },
                        "required": ["id", "state", "status_url"],
                    }
                }
            },
        },
        "422": {"description": 'invalid input: `{"error", "field"}` naming the field'},
        "429": {"description": "queue or upload space full; retry after `Retry-After` s"},
    },
}
"""The `openapi_extra` of the `POST /v1/videos` route."""


def components() -> dict[str, Any]:
    """The schemas `CREATE_VIDEO_OPENAPI` refers to: `VideoRequest` and what it nests."""
    schema = VideoRequest.model_json_schema(ref_template=_REF)
    nested = schema.pop("$defs", {})
    return {"VideoRequest": schema, **nested}
