# Module layering (docs/ARCHITECTURE.md): every #include must follow the intended arrows or be a
# listed known violation; a fixed violation must be removed from the list.
add_test(NAME layers COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/scripts/layers.py --check WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(layers PROPERTIES LABELS "unit")
