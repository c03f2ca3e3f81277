"""Applications built on the SDK: ready pipelines that run several compiled models
together (``ratelnn.apps.face``: MTCNN face detection + an emotion model, docs/face-pipeline.md)."""
